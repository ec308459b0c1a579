"""``kvroute scorecard``: simulate the goal cases of token-aware routing and judge each.

```
kvroute scorecard --out docs/benchmarks/token-aware/scorecard [--traces ../shared/traces]
    [--routing FILE] [--cases mooncake-1-1000,azure-1-1500] [--peers round-robin,llm-d-default]
    [--jobs 2] [--client-max-tokens exact|none|N] [--judge-only]
```

Each case (``sim.scorecard.DEFAULT_CASES``) is a ``kvroute sim`` run with a goodput search
of kvroute (``config/routing.yaml``, or the routing file ``--routing`` names, judged under its
file name's stem) and the peers on ``config/fleets/bench-mixed.yaml``,
written to ``OUT/<case>/``; a ServeGen case first draws its trace into ``OUT/traces/``. Then
``OUT/scorecard.md`` and ``OUT/scorecard.json`` hold every goal's verdict. ``--judge-only``
re-reads the cases' summaries without simulating. ``--client-max-tokens`` is ``kvroute sim``'s:
what clients send as ``max_tokens`` (by default each answer's recorded length).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sim.cli import out_problem
from sim.client_max_tokens import ClientMaxTokens
from sim.policy_names import policy_label
from sim.scorecard import DEFAULT_CASES, KVROUTE, PEERS, Case, Verdict, judge, markdown
from workers.project_files import MissingDefaultFile, default_file

DEFAULT_FLEET = "config/fleets/bench-mixed.yaml"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "scorecard", help="simulate the goal cases of token-aware routing and judge each",
        description="Run kvroute and the peer policies over slices of the Mooncake, Azure "
                    "code and ServeGen traces with a goodput search, and judge kvroute "
                    "against each goal (goodput, prefix hits, cost at the same SLO "
                    "attainment). Writes OUT/<case>/ and OUT/scorecard.{md,json}.")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--traces", type=Path, default=Path("../shared/traces"),
                        help="directory holding the traces (default: %(default)s)")
    parser.add_argument("--fleet", type=Path, default=None,
                        help=f"fleet YAML (default: {DEFAULT_FLEET}, in this directory, else "
                             "in the kvroute checkout)")
    parser.add_argument("--routing", type=Path, metavar="FILE",
                        help="judge this routing file instead of config/routing.yaml (its "
                             "rows are named by the file's stem)")
    parser.add_argument("--cases", default=",".join(c.name for c in DEFAULT_CASES),
                        help="comma-separated case names (default: all: %(default)s)")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="comma-separated peer policies (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="policies simulated in parallel (default: %(default)s)")
    parser.add_argument("--client-max-tokens", default="exact", metavar="exact|none|N",
                        help="what clients send as max_tokens, as for kvroute sim "
                             "(default: %(default)s: each answer's recorded length)")
    parser.add_argument("--judge-only", action="store_true",
                        help="judge the cases already simulated in OUT, simulate nothing")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    known = {case.name: case for case in DEFAULT_CASES}
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        print(f"kvroute scorecard: --cases: unknown case(s) {', '.join(unknown) or '(none)'}; "
              f"choose from {', '.join(known)}", file=sys.stderr)
        return 2
    cases = [known[n] for n in names]
    if args.fleet is None:
        try:
            args.fleet = default_file(DEFAULT_FLEET, "--fleet")
        except MissingDefaultFile as exc:
            print(f"kvroute scorecard: {exc}", file=sys.stderr)
            return 2
    if args.jobs < 1:
        print("kvroute scorecard: --jobs: must be >= 1", file=sys.stderr)
        return 2
    try:
        client_max_tokens = ClientMaxTokens.parse(args.client_max_tokens)
    except ValueError as exc:
        print(f"kvroute scorecard: --client-max-tokens: {exc}", file=sys.stderr)
        return 2
    judged = KVROUTE if args.routing is None else policy_label(str(args.routing))
    if not args.judge_only:
        peers = tuple(p.strip() for p in args.peers.split(",") if p.strip())
        if args.routing is not None:
            code = _check_routing(args.routing, judged, peers)
            if code != 0:
                return code
        code = _check_peers(peers)
        if code != 0:
            return code
        problem = out_problem(args.out)     # before the cases run, not after them
        if problem:
            print(f"kvroute scorecard: {problem}", file=sys.stderr)
            return 2
        # the verdicts of an earlier run go first: a run stopped midway left them, looking
        # complete, beside its own cases (and --judge-only then judged the mix)
        for verdicts in ("scorecard.md", "scorecard.json"):
            (args.out / verdicts).unlink(missing_ok=True)
        own = KVROUTE if args.routing is None else str(args.routing)
        code = _simulate_all(cases, args, (own, *peers), client_max_tokens)
        if code != 0:
            return code
    return _judge_all(cases, args.out, judged)


def _check_routing(routing: Path, judged: str, peers: tuple[str, ...]) -> int:
    """The routing file to judge must load, and its name must not be one of the peers'."""
    from policies.errors import RoutingConfigError
    from policies.loader import load_routing

    if routing.suffix not in (".yaml", ".yml"):
        print(f"kvroute scorecard: --routing: {routing}: give a .yaml or .yml file",
              file=sys.stderr)
        return 2
    if not routing.is_file():
        print(f"kvroute scorecard: --routing: {routing}: no such file", file=sys.stderr)
        return 2
    try:
        load_routing(routing)
    except RoutingConfigError as exc:
        print(f"kvroute scorecard: --routing: {routing}: {exc}", file=sys.stderr)
        return 2
    if judged in peers:
        print(f"kvroute scorecard: --routing: {routing} would be named {judged!r}, as a peer "
              "in --peers is; rename the file", file=sys.stderr)
        return 2
    return 0


def _check_peers(peers: tuple[str, ...]) -> int:
    """Every peer of ``--peers`` must be a policy ``kvroute sim`` knows (a preset, ``kvroute``
    or a routing file that loads): a misspelt one was found by the first case's simulation,
    its output folder made, after the command had started."""
    from policies.errors import RoutingConfigError
    from sim.policy_names import UnknownPolicyError, resolve_policy

    if not peers:          # kvroute alone, judged against nobody: every goal unreadable
        print("kvroute scorecard: --peers: give at least one peer policy", file=sys.stderr)
        return 2
    for peer in peers:
        try:
            resolve_policy(peer)
        except (UnknownPolicyError, RoutingConfigError) as exc:
            print(f"kvroute scorecard: --peers: {exc}", file=sys.stderr)
            return 2
    return 0


def _simulate_all(cases: list[Case], args: argparse.Namespace, policies: tuple[str, ...],
                  client_max_tokens: ClientMaxTokens) -> int:
    """Each case's ``kvroute sim`` run into ``OUT/<case>/``, one after the other."""
    missing = [str(p) for p in (_source(args.traces, case) for case in cases) if not p.is_file()]
    if missing:
        print(f"kvroute scorecard: no such trace: {', '.join(missing)} (--traces names "
              "the directory that holds them)", file=sys.stderr)
        return 2
    for number, case in enumerate(cases, 1):
        print(f"kvroute scorecard: case {number} of {len(cases)}: {case.name} "
              f"({case.about})", file=sys.stderr)
        started = time.monotonic()
        code = _simulate(case, args, policies, client_max_tokens)
        if code != 0:
            print(f"kvroute scorecard: {case.name}: the simulation failed (exit {code})",
                  file=sys.stderr)
            return code
        print(f"kvroute scorecard: {case.name} done in {time.monotonic() - started:.0f} s",
              file=sys.stderr)
    return 0


def _judge_all(cases: list[Case], out: Path, judged: str) -> int:
    """Every case's verdicts for the policy ``judged`` from its ``summary.json``, written to
    ``OUT/scorecard.{md,json}`` and printed."""
    verdicts: list[Verdict] = []
    sent: dict[str, str] = {}        # case -> what its clients sent as max_tokens
    for case in cases:
        summary_path = out / case.name / "summary.json"
        if not summary_path.is_file():
            print(f"kvroute scorecard: {summary_path}: missing (run without --judge-only)",
                  file=sys.stderr)
            return 2
        try:
            summary = json.loads(summary_path.read_text())
            verdicts += judge(case, summary, judged)
        except (KeyError, ValueError) as exc:
            print(f"kvroute scorecard: {summary_path}: {exc}", file=sys.stderr)
            return 2
        sent[case.name] = summary.get("settings", {}).get("client_max_tokens", "exact")
    table = _max_tokens_line(sent) + markdown(cases, verdicts, judged)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scorecard.md").write_text(table)
    (out / "scorecard.json").write_text(json.dumps(
        {"policy": judged, "cases": [asdict(case) for case in cases],
         "client_max_tokens": sent,
         "verdicts": [v.as_json() for v in verdicts]}, indent=2) + "\n")
    print(table, end="")
    print(f"wrote {out / 'scorecard.md'} and scorecard.json", file=sys.stderr)
    return 0


def _max_tokens_line(sent: dict[str, str]) -> str:
    """A line above the table when some case's clients did not send each answer's length."""
    told = {label for label in sent.values() if label != "exact"}
    if not told:
        return ""
    not_exact = sum(label != "exact" for label in sent.values())
    return (f"`--client-max-tokens`: {', '.join(sorted(told))} in {not_exact} of {len(sent)} "
            "cases (otherwise each answer's recorded length).\n\n")


def _source(traces: Path, case: Case) -> Path:
    """The file a case reads (its ServeGen archive when it draws its trace)."""
    return traces / (case.servegen.archive if case.servegen is not None else case.trace)


def _simulate(case: Case, args: argparse.Namespace, policies: tuple[str, ...],
              client_max_tokens: ClientMaxTokens) -> int:
    from sim.servegen import ServeGenError
    from sim.session import SimulationRequest, run_session

    trace = _source(args.traces, case)
    if case.servegen is not None:
        try:
            trace = _draw_servegen(case, trace, args.out / "traces")
        except ServeGenError as exc:
            print(f"kvroute scorecard: {exc}", file=sys.stderr)
            return 2
    request = SimulationRequest(
        trace=str(trace), fleet=str(args.fleet), policies=policies,
        out=str(args.out / case.name), goodput=True, skip=case.skip, limit=case.limit,
        jitter_s=case.jitter_s, jobs=args.jobs, client_max_tokens=client_max_tokens)
    with contextlib.redirect_stdout(io.StringIO()):    # each case's table: in its summary.md
        return run_session(request)


def _draw_servegen(case: Case, archive: Path, directory: Path) -> Path:
    from sim.servegen import read_archive, servegen_requests, write_jsonl

    span = case.servegen
    assert span is not None
    path = directory / f"{case.name}.jsonl.gz"
    if not path.is_file():
        directory.mkdir(parents=True, exist_ok=True)
        requests = servegen_requests(read_archive(archive), span.start_s, span.duration_s)
        write_jsonl(requests, path)
    return path


__all__ = ["main", "register"]
