"""``kvroute sim``: replay a trace through several policies on a virtual fleet.

```
kvroute sim --trace ../shared/traces/mooncake_conversation_trace.jsonl.gz \\
    --fleet config/fleets/bench-mixed.yaml --policies kvroute,round-robin,dynamo-kv \\
    --out out/sim-mooncake [--rate-scale 1.0] [--goodput] [--skip N] [--limit N] [--duration S]
    [--seed N] [--jitter S] [--jobs N] [--kv-events] [--client-max-tokens exact|none|N]
    [--slo-ttft-s S] [--slo-tpot-ms MS] [--slo-attainment F]
```

Writes ``OUT/summary.json`` (schema in ``docs/sim.md``), ``OUT/summary.md``, the plots
``ttft_cdf.png``, ``goodput.png``, ``cost.png`` and one ``requests/<policy>.csv`` per policy.
Progress goes to stderr. ``--jobs N`` runs N policies at once in separate processes.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any

from sim.slo import GOODPUT_ATTAINMENT, SLO_TPOT_S


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sim", help="simulate policies on a virtual fleet with a real trace",
        description="Replay a request trace through routing policies on a virtual-time fleet "
                    "of engine models; write summary.json, a Markdown table and plots.")
    parser.add_argument("--trace", required=True,
                        help="Mooncake JSONL, Azure CSV or generic JSONL (.gz ok)")
    parser.add_argument("--trace-format", default="auto",
                        choices=["auto", "mooncake", "azure", "jsonl"],
                        help="auto: .csv is Azure, JSONL whose first row has hash_ids and "
                             "timestamp is Mooncake, other JSONL the generic format "
                             "(default: %(default)s)")
    parser.add_argument("--fleet", required=True, help="fleet YAML (e.g. config/fleets/...)")
    parser.add_argument("--policies", required=True,
                        help="comma-separated: peer names, 'kvroute', or routing YAML paths")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--rate-scale", type=float, default=1.0,
                        help="multiply the arrival rate (2.0 = twice as many requests/s)")
    parser.add_argument("--goodput", action="store_true",
                        help="also search the largest rate scale with SLO attainment >= "
                             "--slo-attainment (90%% by default)")
    parser.add_argument("--skip", type=int, default=0, metavar="N",
                        help="leave out the first N requests (in arrival order, after "
                             "--jitter); the slice's clock starts at the next one, and --limit "
                             "and --duration count from it (default: %(default)s)")
    parser.add_argument("--limit", type=int, default=None, help="first N requests only")
    parser.add_argument("--duration", type=float, default=None,
                        help="requests of the first S seconds of the trace only")
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the synthetic token ids, the --jitter delays and the "
                             "policies' random choices (default: %(default)s)")
    parser.add_argument("--jitter", type=float, default=0.0,
                        help="add a seeded uniform delay in [0, S) s to every arrival "
                             "(3 spreads Mooncake's 3 s timestamp buckets)")
    parser.add_argument("--scrape-interval", type=float, default=None,
                        help="seconds between worker snapshots (default: the router's)")
    parser.add_argument("--kv-events", action="store_true",
                        help="engines publish KV events and the policies' prefix plugins "
                             "follow them (exact index), as with workers' --kv-events")
    parser.add_argument("--client-max-tokens", default="exact", metavar="exact|none|N",
                        help="what clients send as max_tokens: each answer's recorded length "
                             "(exact), nothing (none), or one cap N for all, raised to an "
                             "answer that was longer; the answers stay the trace's "
                             "(default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=1, help="policies simulated in parallel")
    parser.add_argument("--slo-ttft-s", type=float, default=None, metavar="S",
                        help="one TTFT target of S seconds for every request (default: each "
                             "prompt's max(0.5 s, 3 x its prefill time on an idle H100))")
    parser.add_argument("--slo-tpot-ms", type=float, default=SLO_TPOT_S * 1000, metavar="MS",
                        help="TPOT target, milliseconds per output token after the first "
                             "(default: %(default)g)")
    parser.add_argument("--slo-attainment", type=float, default=GOODPUT_ATTAINMENT,
                        metavar="F",
                        help="share of requests that must meet the SLO at the goodput rate, "
                             "in (0, 1] (default: %(default)g)")
    parser.set_defaults(func=main)


def range_problem(name: str, value: float | None, low: float, *,
                  inclusive: bool = True) -> str | None:
    """``NAME: must be ...`` when an option's ``value`` is out of range, else None (also for an
    option not given, None). A float must be finite; every value must be >= ``low``, or > it
    when not ``inclusive``. Shared by the ``kvroute sim``, ``trace`` and ``bench`` commands."""
    if value is None:
        return None
    finite = not isinstance(value, float) or math.isfinite(value)
    if finite and (value >= low if inclusive else value > low):
        return None
    kind = "a finite number " if isinstance(value, float) else ""
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{name}: must be {kind}{'>=' if inclusive else '>'} {low:g}, got {shown}"


def share_problem(name: str, value: float) -> str | None:
    """``NAME: must be in (0, 1], got X`` unless ``value`` is a share in (0, 1]."""
    if math.isfinite(value) and 0 < value <= 1:
        return None
    return f"{name}: must be a number in (0, 1], got {value:g}"


def same_label_problem(policies: list[str]) -> str | None:
    """The problem when two policies would share a row of the results (two files of one
    name in different folders, a peer and its preset file, one policy given twice)."""
    from sim.policy_names import policy_label

    by_label: dict[str, list[str]] = {}
    for name in policies:
        by_label.setdefault(policy_label(name), []).append(name)
    for label, names in by_label.items():
        if len(names) > 1:
            return (f"--policies: two policies would both be named {label!r} in the results "
                    f"({', '.join(names)}); rename one")
    return None


def first_problem(*problems: str | None) -> str | None:
    return next((p for p in problems if p), None)


def out_problem(out: Path | str | None) -> str | None:
    """``--out: cannot write DIR: <reason>`` when the folder cannot be made or written (it is
    made here, before the run: results must not be lost to a typo after a long run). Shared
    by the ``kvroute sim``, ``scorecard``, ``trace`` and ``bench`` commands."""
    if out is None:
        return None
    if not str(out).strip():     # Path("") is the current folder: perhaps a checkout
        return "--out: give a folder's name (an empty one would write in the current folder)"
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:      # (the folder, or one above it, is a file: "File exists")
        blocker = next(p for p in (out, *out.parents) if p.exists() or p.is_symlink())
        if not blocker.exists():          # a link to nothing
            return (f"--out: cannot write {out}: {blocker} is a link to {os.readlink(blocker)}, "
                    "which does not exist")
        return f"--out: cannot write {out}: {blocker} is a file, not a folder"
    except OSError as exc:
        return f"--out: cannot write {out}: {exc.strerror or exc}"
    if not os.access(out, os.W_OK | os.X_OK):
        return f"--out: cannot write {out}: Permission denied"
    return None


def main(args: argparse.Namespace) -> int:
    from sim.client_max_tokens import ClientMaxTokens
    from sim.session import SimulationRequest, run_session
    from sim.slo import Slo

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not policies:
        print("kvroute sim: --policies: give at least one policy", file=sys.stderr)
        return 2
    problem = same_label_problem(policies)
    if problem:
        print(f"kvroute sim: {problem}", file=sys.stderr)
        return 2
    problem = first_problem(
        range_problem("--rate-scale", args.rate_scale, 0, inclusive=False),
        range_problem("--skip", args.skip, 0),
        range_problem("--limit", args.limit, 0, inclusive=False),
        range_problem("--duration", args.duration, 0, inclusive=False),
        range_problem("--seed", args.seed, 0),
        range_problem("--jitter", args.jitter, 0),
        range_problem("--scrape-interval", args.scrape_interval, 0, inclusive=False),
        range_problem("--jobs", args.jobs, 1),
        range_problem("--slo-ttft-s", args.slo_ttft_s, 0, inclusive=False),
        range_problem("--slo-tpot-ms", args.slo_tpot_ms, 0, inclusive=False),
        share_problem("--slo-attainment", args.slo_attainment))
    if problem:
        print(f"kvroute sim: {problem}", file=sys.stderr)
        return 2
    try:
        client_max_tokens = ClientMaxTokens.parse(args.client_max_tokens)
    except ValueError as exc:
        print(f"kvroute sim: --client-max-tokens: {exc}", file=sys.stderr)
        return 2
    request = SimulationRequest(
        trace=args.trace, trace_format=args.trace_format, fleet=args.fleet,
        policies=tuple(policies), out=args.out, rate_scale=args.rate_scale,
        goodput=args.goodput, skip=args.skip, limit=args.limit, duration_s=args.duration,
        seed=args.seed,
        scrape_interval_s=args.scrape_interval, jobs=args.jobs, jitter_s=args.jitter,
        kv_events=args.kv_events, client_max_tokens=client_max_tokens,
        slo=Slo(ttft_s=args.slo_ttft_s, tpot_s=args.slo_tpot_ms / 1000,
                attainment=args.slo_attainment))
    return run_session(request)
