"""``kvroute launch-vllm --fleet FILE``: start a vLLM server for every real worker of a fleet.

Workers with ``url:`` and a ``launch:`` block are started (``--worker ID`` picks some), each
with the command ``workers.launch.command`` builds from its GPU profile; the command waits
until every ``/health`` answers, then keeps the servers running until SIGINT/SIGTERM/SIGHUP
(also while they start) and stops them by pid. When a server ends on its own, the others are
stopped and the command exits 1 with that server's log tail, so that a supervisor restarts
the set. ``--dry-run`` prints the commands and starts nothing.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

PROG = "kvroute launch-vllm"      # the prefix of its error lines, as other commands' own


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "launch-vllm", help="start vLLM servers for the real workers of a fleet",
        description=__doc__.split("\n\n")[1] if __doc__ else None)
    parser.add_argument("--fleet", required=True, type=Path, help="fleet file (YAML)")
    parser.add_argument("--worker", action="append", default=[], metavar="ID",
                        help="launch only this worker (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--log-dir", type=Path, default=Path("logs"),
                        help="where each server's output goes (default: ./logs)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds to wait for every /health (default 900)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workers.fleet import FleetConfigError, load_fleet
    from workers.launch.command import build_command
    from workers.launch.process import LaunchError, LaunchInterrupted, VllmFleet
    from workers.launch.settings import LaunchConfigError

    try:
        fleet = load_fleet(args.fleet)
        chosen = [w for w in fleet.workers if w.launch is not None
                  and (not args.worker or w.info.id in args.worker)]
        missing = sorted(set(args.worker) - {w.info.id for w in chosen})
        if missing:
            raise LaunchConfigError(f"--worker: no launchable worker {', '.join(missing)} "
                                    "(a real worker needs a launch: block)")
        if not chosen:
            raise LaunchConfigError(f"{args.fleet}: no worker has a launch: block")
        try:
            commands = [build_command(w) for w in chosen]
        except LaunchConfigError as exc:     # a launch: block's key: name the file too
            raise LaunchConfigError(f"{fleet.source}: {exc}") from exc
    except (FleetConfigError, LaunchConfigError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    for command in commands:
        print(f"# {command.worker_id} -> {command.url}\n{command.shell()}", flush=True)
    if args.dry_run:
        return 0
    servers = VllmFleet(commands, args.log_dir)
    stop = threading.Event()
    # SIGHUP too (a closed terminal): by default it ended the launcher at once, and the
    # servers, each in a session of its own, ran on without it
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    try:
        servers.start(timeout_s=args.timeout, stop=stop)
    except LaunchInterrupted as exc:
        print(f"{PROG}: {exc}; every server stopped", file=sys.stderr)
        return 130
    except LaunchError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    print(f"{len(commands)} vLLM server(s) healthy; Ctrl-C stops them", flush=True)
    try:
        while not stop.wait(1.0):
            ended = servers.exited()
            if ended:
                process, code = ended[0]
                print(f"{PROG}: {process.command.worker_id}: vLLM exited with code {code}; "
                      f"stopping the others; log tail:\n{process.log_tail()}", file=sys.stderr)
                return 1
    finally:
        servers.stop()
    return 0
