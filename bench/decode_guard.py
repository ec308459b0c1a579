"""CPU of the decode guard's bookkeeping per routed request, by the incumbents of a worker.

Every request the router places becomes an incumbent of its worker's decode guard
(``policies.latency.decode_guard``): its admission stalls every request still decoding
there, and its completion drops it. Both run on the event loop, in the request path, so
their cost at a busy worker's batch is the guard's price.

For each ``--incumbents`` count N, one worker is filled with N incumbents whose answers
outlast the run, then ``--requests`` requests are each admitted and completed in turn (the
count stays N, N + 1 between the two), and the thread's CPU time of each admission and each
completion is taken. Reports the median and the 99th percentile of each, per count.

Writes ``decode_guard.json`` to ``--out`` and prints a Markdown table::

    taskset -c 1 python -m bench.decode_guard --incumbents 8,32,128,512,2048 --out DIR
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from bench.checks import first_problem, int_list, int_list_problem, range_problem, refusal

TPOT_OBJECTIVE_S = 0.05


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--incumbents", default="8,32,128,512,2048",
                        help="comma-separated incumbent counts of the worker "
                             "(default %(default)s)")
    parser.add_argument("--requests", type=int, default=2000,
                        help="requests admitted and completed per count (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the estimates")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for decode_guard.json")


def _estimate(rng: random.Random, prefill_s: float) -> Any:
    from policies.latency.estimator import Estimate

    tpot = rng.uniform(0.01, 0.04)
    ttft = prefill_s + rng.uniform(0.0, 0.2)
    return Estimate(ttft_s=ttft, tpot_s=tpot, gpu_s=1.0, cost_usd=0.0, cached_tokens=0,
                    raw_ttft_s=ttft, raw_tpot_s=tpot, prefill_s=prefill_s,
                    prefill_steps=rng.randint(1, 4))


def measure(count: int, args: argparse.Namespace) -> dict[str, Any]:
    """One incumbent count: CPU µs per admission and per completion."""
    from bench.stats import percentile
    from policies.latency.decode_guard import DecodeGuard

    rng = random.Random(args.seed + count)
    guard = DecodeGuard(tpot_objective_s=TPOT_OBJECTIVE_S)
    now = 0.0
    for n in range(count):         # answers of 100,000 tokens: none ends within the run
        guard.admit(f"held-{n}", "w", now, _estimate(rng, rng.uniform(0.0, 0.02)), 100_000)
    admit: list[float] = []
    complete: list[float] = []
    gc.collect()
    for n in range(args.requests):
        now += 0.001
        estimate = _estimate(rng, rng.uniform(0.0, 0.02))
        started = time.thread_time_ns()
        guard.admit(f"new-{n}", "w", now, estimate, 100_000)
        admitted = time.thread_time_ns()
        guard.complete(f"new-{n}")
        completed = time.thread_time_ns()
        admit.append((admitted - started) / 1e3)
        complete.append((completed - admitted) / 1e3)
    return {"incumbents": count, "incumbents_after": guard.incumbents("w"),
            "admit_p50_us": percentile(admit, 50), "admit_p99_us": percentile(admit, 99),
            "complete_p50_us": percentile(complete, 50),
            "complete_p99_us": percentile(complete, 99)}


def markdown(counts: list[dict[str, Any]]) -> str:
    lines = ["| incumbents | admit µs p50 / p99 | complete µs p50 / p99 |", "|---|---|---|"]
    for c in counts:
        lines.append(f"| {c['incumbents']:,} | {c['admit_p50_us']:.1f} / "
                     f"{c['admit_p99_us']:.1f} | {c['complete_p50_us']:.1f} / "
                     f"{c['complete_p99_us']:.1f} |")
    return "\n".join(lines)


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    return first_problem(int_list_problem("--incumbents", args.incumbents, 0),
                         range_problem("--requests", args.requests, 1))


def run(args: argparse.Namespace) -> int:
    refused = refusal("decode-guard", args, check)
    if refused is not None:
        return refused
    counts = int_list(args.incumbents)
    results = []
    for count in counts:
        print(f"[decode-guard] {count} incumbents", file=sys.stderr, flush=True)
        results.append(measure(count, args))
    report = {"requests": args.requests, "seed": args.seed,
              "python": sys.version.split()[0], "counts": results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decode_guard.json").write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(results))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decode_guard", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
