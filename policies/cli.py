"""``kvroute validate FILE [--fleet F]``: check a routing file the way the router would.

Parses the file strictly, then builds every plugin (against the fleet when ``--fleet`` is
given, which also checks that rule rewrites name models and pools the fleet has). Exit 0
with a one-line summary (and warnings, such as a profile without a model filter, on
stderr); exit 1 with the reason, naming the field, on stderr. With ``--fleet``, what
``kvroute serve`` would also refuse in that fleet on this host (a worker's ``api_key_env``
unset, an unusable ``tls_ca_file``) is a warning: the routing file is still valid.
``--strict`` makes any warning exit 1 (a deploy step that gates on the exit code: the router
would refuse at start, or on reload, a fleet whose key is unset on its host).
``--time-decisions N [--workers W]`` then times producers and decisions
(``policies.timing``) and prints one more line; a plugin skipped for failing in any of them
makes it exit 1, naming the plugin.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate", help="validate a routing file (exit 1 with the reason when invalid)")
    parser.add_argument("file", help="routing file, e.g. config/routing.yaml")
    parser.add_argument("--fleet", help="fleet file to check rule models and pools against")
    parser.add_argument("--time-decisions", type=int, default=0, metavar="N",
                        help="also time N synthetic requests (needs --fleet)")
    parser.add_argument("--workers", type=int, default=None, metavar="W",
                        help="with --time-decisions: number of worker views (default: fleet)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when there is any warning (a deploy step gating on it)")
    parser.set_defaults(func=validate_command)


def _fleet_start_problems(fleet: Any) -> list[str]:
    """What the router checks of a fleet only at start: workers' keys and CA bundles."""
    import os

    from workers.credentials import worker_authorizations
    from workers.fleet import FleetConfigError
    from workers.tls import worker_tls_contexts

    problems = []
    infos = [worker.info for worker in fleet.workers]
    for check in (lambda: worker_authorizations(infos, os.environ),
                  lambda: worker_tls_contexts(infos)):
        try:
            check()
        except FleetConfigError as exc:
            problems.append(str(exc))
    return problems


def validate_command(args: argparse.Namespace) -> int:
    from policies.engine import PolicyEngine
    from policies.errors import RoutingConfigError
    from policies.loader import load_routing
    from policies.summary import fleet_warnings, summarize
    from workers.fleet import FleetConfig, FleetConfigError, load_fleet

    if args.time_decisions < 0:      # (it was taken, and nothing was timed)
        print(f"--time-decisions: must be >= 1, got {args.time_decisions}", file=sys.stderr)
        return 2
    if args.workers is not None and args.workers < 1:   # (0 timed the fleet's, <0 none)
        print(f"--workers: must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    if args.time_decisions > 0 and not args.fleet:
        print("--time-decisions needs --fleet", file=sys.stderr)
        return 2
    if args.workers is not None and args.time_decisions <= 0:   # (it was taken, and ignored)
        print("--workers needs --time-decisions", file=sys.stderr)
        return 2
    try:
        fleet = load_fleet(args.fleet) if args.fleet else FleetConfig({}, {}, ())
    except FleetConfigError as exc:
        print(f"invalid fleet: {exc}", file=sys.stderr)
        return 1
    try:
        routing = load_routing(args.file)
        PolicyEngine.build(routing, fleet)
    except RoutingConfigError as exc:
        reason = str(exc).removeprefix(f"{args.file}: ")    # the file is named once
        print(f"{args.file}: invalid: {reason}", file=sys.stderr)
        return 1
    print(f"{args.file}: ok: {summarize(routing)}")
    warnings = 0
    for warning in fleet_warnings(routing, fleet):
        print(f"{args.file}: warning: {warning}", file=sys.stderr)
        warnings += 1
    if not args.fleet:
        print(f"{args.file}: note: without --fleet, the models, pools and sequences it "
              "names are not checked against a fleet", file=sys.stderr)
    if args.fleet:
        for problem in _fleet_start_problems(fleet):
            print(f"{args.fleet}: warning: kvroute serve would not start here: {problem}",
                  file=sys.stderr)
            warnings += 1
    if args.time_decisions > 0:
        if not fleet.workers:
            print(f"--time-decisions: {args.fleet} has no workers", file=sys.stderr)
            return 2
        from policies.timing import time_decisions

        engine = PolicyEngine.build(routing, fleet, seed=0)
        workers = args.workers or len(fleet.workers)
        timing = time_decisions(engine, fleet, args.time_decisions, workers)
        print(timing.line())
        if timing.skipped:
            failed = ", ".join(f"{name} in {count} of {timing.requests} decisions"
                               for name, count in sorted(timing.skipped.items()))
            print(f"{args.file}: invalid: plugins failed and were skipped: {failed} (their "
                  "tracebacks are above)", file=sys.stderr)
            return 1
    if args.strict and warnings:
        print(f"{args.file}: refused by --strict: {warnings} warning(s) above", file=sys.stderr)
        return 1
    return 0
