"""Whether the slowest decisions are slow by their nature or by the machine's.

``bench.decision`` reports a decision-time p99 and, beside it, the tail a fixed loop gets on
the same machine. This benchmark asks the question directly: the same decision sequence
(the same seed, synthetic fleet, load and requests, so the same decisions) is timed twice in
one process, and the slowest ``--share`` of the decisions of one run are looked up among the
slowest of the other. Decisions slow by their nature (a longer path through the policy, a
larger structure to walk) are slow in both runs; slowness the machine adds (time slices,
caches, frequency) falls on other decisions each time, and then the overlap is near what
chance gives (``--share``) and the two runs' times are uncorrelated.

The machine's speed also drifts within a run (on a shared host the median of a quarter of a
run moves by a third), which would make whole stretches of decisions "slow"; so each
decision is compared with the median of its ``--window`` neighbours on either side in its
own run, and the overlap and the correlation are of those ratios. Each run's quarter
medians are reported, to show the drift.

    taskset -c 1 python -m bench.decision_tail --workers 10 --decisions 1000 --out DIR

Writes ``decision_tail.json`` to ``--out`` and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench.checks import range_problem
from bench.decision import _pct, add_workload_arguments, time_decisions, workload_problem


def slowest(timings: list[float], share: float) -> set[int]:
    """Positions of the slowest ``share`` of ``timings`` (at least one)."""
    count = max(1, round(share * len(timings)))
    return set(sorted(range(len(timings)), key=timings.__getitem__, reverse=True)[:count])


def relative_to_neighbours(timings: list[float], window: int) -> list[float]:
    """Each time divided by the median of itself and its ``window`` neighbours on each side:
    slowness against the machine's speed at that moment."""
    return [value / statistics.median(timings[max(0, i - window):i + window + 1])
            for i, value in enumerate(timings)]


def tail_overlap(first: list[float], second: list[float], share: float) -> float:
    """Of the slowest ``share`` of decisions in ``first``, the fraction also among the slowest
    ``share`` in ``second`` (1: the same decisions are slow; about ``share``: chance)."""
    if len(first) != len(second) or not first:
        raise ValueError("two runs of the same, non-empty decision sequence are needed")
    slow = slowest(first, share)
    return len(slow & slowest(second, share)) / len(slow)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decision_tail",
                                     description=__doc__.split("\n", 1)[0])
    add_workload_arguments(parser, decisions=1000, warmup=200)
    parser.add_argument("--workers", type=int, default=10, help="fleet size (default 10)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the fleet's load, the prompts and the policy, the same for "
                             "both runs (default %(default)s)")
    parser.add_argument("--share", type=float, default=0.03,
                        help="the slowest share of decisions compared (default %(default)s)")
    parser.add_argument("--window", type=int, default=25,
                        help="neighbours on each side a decision is compared with "
                             "(default %(default)s)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for decision_tail.json")
    args = parser.parse_args(argv)
    if args.decisions < 4 or not 0.0 < args.share < 1.0 or args.window < 1:
        parser.error("--decisions must be at least 4, --share within (0, 1), --window >= 1")
    problem = workload_problem(args) or range_problem("--workers", args.workers, 1)
    if problem:
        parser.error(problem)
    args.gc_freeze = True
    from policies.loader import load_routing

    routing = load_routing(args.routing)
    runs: list[list[float]] = []
    for run in (1, 2):
        print(f"[decision-tail] run {run}: {args.workers} workers, {args.warmup} warm-up + "
              f"{args.decisions} timed", file=sys.stderr, flush=True)
        timings: list[float] = []
        time_decisions(routing, args.workers, args, record=timings)
        runs.append(timings)
    first, second = (relative_to_neighbours(t, args.window) for t in runs)
    quarter = len(first) // 4
    report = {
        "routing": str(args.routing), "workers": args.workers, "decisions": args.decisions,
        "warmup": args.warmup, "seed": args.seed, "share": args.share, "window": args.window,
        "runs": [{"cpu_p50_us": _pct(sorted(t), 50), "cpu_p99_us": _pct(sorted(t), 99),
                  "quarter_medians_us": [statistics.median(t[k * quarter:(k + 1) * quarter])
                                         for k in range(4)]}
                 for t in runs],
        "tail_overlap": tail_overlap(first, second, args.share),
        "correlation": statistics.correlation(first, second),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decision_tail.json").write_text(json.dumps(report, indent=2) + "\n")
    for number, run_report in enumerate(report["runs"], 1):
        medians = " / ".join(f"{m:.0f}" for m in run_report["quarter_medians_us"])
        print(f"run {number}: CPU p50 {run_report['cpu_p50_us']:.0f} µs, "
              f"p99 {run_report['cpu_p99_us']:.0f} µs; quarter medians {medians} µs")
    print(f"against their neighbours, the slowest {100 * args.share:.0f} % of run 1's "
          f"decisions: {100 * report['tail_overlap']:.0f} % of them among run 2's slowest "
          f"(chance: {100 * args.share:.0f} %); correlation of the two runs "
          f"{report['correlation']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
