"""Time of recomputing one worker's four correction factors, and of reading kept ones.

Teaches an ``OnlineCorrection`` 3,000 seeded outcomes over ten workers of three GPU classes
and eight TTFT regimes, then times ``factors`` 20,000 times with the kept factors dropped
before each call (a recomputation) and 20,000 times kept (thread CPU, the cost of dropping
subtracted). ``--repo`` imports the correction from another checkout of kvroute, to compare
commits.

    python docs/benchmarks/token-aware/judged-correction/recompute.py [--repo PATH]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]


def per_call_us(calls: int, body: object) -> float:
    started = time.thread_time_ns()
    for _ in range(calls):
        body()  # type: ignore[operator]
    return (time.thread_time_ns() - started) / calls / 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, default=REPO, help="kvroute checkout to import")
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.repo.resolve()))
    from policies.latency.online import OnlineCorrection, Prediction

    rng = random.Random(0)
    correction = OnlineCorrection()
    classes = ("H100", "A100", "L40S")
    for n in range(3000):
        worker = rng.randrange(10)
        correction.remember(str(n), Prediction(f"w{worker}", classes[worker % 3], 0.2, 0.02,
                                               rng.randrange(4, 12)))
        correction.observe(str(n), 0.2 * rng.lognormvariate(0, 0.3),
                           0.02 * rng.lognormvariate(0, 0.3))
    kept = correction._kept

    def recompute() -> None:
        kept.clear()
        correction.factors("w3", "H100", 7)

    dropping = per_call_us(args.calls, kept.clear)
    recomputing = per_call_us(args.calls, recompute) - dropping
    reading = per_call_us(args.calls, lambda: correction.factors("w3", "H100", 7))
    print(f"{args.repo.resolve()}: recompute {recomputing:.2f} µs, kept {reading:.2f} µs "
          f"per factors() call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
