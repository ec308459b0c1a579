"""The ``kvroute`` command: one entry point, one sub-command module per owner.

Each sub-command lives beside the code it drives and exposes
``register(subparsers) -> None``, which adds its parser and sets ``func`` (a callable taking the
parsed ``argparse.Namespace`` and returning an exit code). Those modules import their heavy
dependencies inside ``func`` so that ``kvroute --help`` stays fast and never imports torch.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from router.version import installed_version

# sub-command module -> what it provides
COMMAND_MODULES: tuple[str, ...] = (
    "router.commands",          # up, serve
    "policies.cli",             # validate
    "workers.emulator.cli",     # emulate
    "workers.launch.cli",       # launch-vllm
    "sim.cli",                  # sim
    "sim.trace_cli",            # trace
    "sim.scorecard_cli",        # scorecard
    "bench.cli",                # bench
    "policies.semantic.cli",    # semantic
    "router.dashboard.cli",     # dashboard
)


# options of sglang-router, vllm-router and production-stack that a command line brought over
# from them carries; kvroute's counterparts are files (docs/migrating.md)
PEER_OPTIONS = ("--worker-urls", "--policy", "--routing-logic", "--service-discovery")


def peer_option_hint(command: str | None, unrecognized: Sequence[str]) -> str:
    """What to add to ``up``'s or ``serve``'s error for options it does not take, when one
    of them is another router's: where kvroute's counterparts are described; else ''."""
    if command not in ("up", "serve") or not any(
            arg.split("=", 1)[0] in PEER_OPTIONS for arg in unrecognized):
        return ""
    return (f" (kvroute {command} takes its workers from a fleet file, --fleet, and its policy "
            "from a routing file, --routing: docs/migrating.md maps the options of "
            "sglang-router, vllm-router and production-stack)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvroute", description="Token-aware load balancer for LLM inference fleets.")
    parser.add_argument("--version", action="version", version=f"kvroute {installed_version()}",
                        help="print the installed kvroute's version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue  # that part of kvroute is not built into this installation
            raise
        module.register(subparsers)
    return parser


class SigtermAsInterrupt:
    """A SIGTERM handler that stops a command as Ctrl-C does, with a ``KeyboardInterrupt``.

    Raised wherever the signal lands, the interrupt could fall inside an event loop's
    transport callback (a client's ``data_received``), which uvloop reports as a fatal
    transport error and swallows: the command ran on. While a loop runs in this thread the
    interrupt is raised from a callback of that loop instead, which the loop lets through
    and ``asyncio.run`` answers by cancelling its tasks; a second SIGTERM raises at once.
    """

    def __init__(self) -> None:
        self.loop_asked = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise KeyboardInterrupt from None
        if self.loop_asked:
            raise KeyboardInterrupt
        self.loop_asked = True
        loop.call_soon_threadsafe(_raise_interrupt)


def _raise_interrupt() -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unrecognized = parser.parse_known_args(argv)
    if unrecognized:         # as parse_args says it, with a hint for another router's options
        parser.error(f"unrecognized arguments: {' '.join(unrecognized)}"
                     f"{peer_option_hint(getattr(args, 'command', None), unrecognized)}")
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    # SIGTERM stops a command as Ctrl-C does, so that what it started (a benchmark's
    # routers and emulators, a simulation's worker processes) is stopped on the way out;
    # it left them running. The servers (up, serve, emulate, launch-vllm) set their own.
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = (signal.signal(signal.SIGTERM, SigtermAsInterrupt()) if in_main_thread
                else None)
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        print(f"kvroute {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
