"""Thread CPU of ``PolicyEngine.decide`` on a fixed state, for A/B runs of two trees.

``bench.decision``'s loop (10 workers, ``--complete``) runs its 300 warm-up and 1,000 timed
decisions; the next 100 requests are then decided again and again, ``ROUNDS`` times, with
no ``on_routed`` in between, so that every round sees the same state. Prints the per-decision
CPU of the rounds (min, p10, median) and a digest of the 100 decisions (worker, reason,
attributes, candidates), which two trees that decide alike share. Run from a tree's root:

    PYTHONHASHSEED=0 PYTHONPATH=. taskset -c 1 python \\
        docs/benchmarks/token-aware/decision-2026-12-06/decide-cheaper/replay_decide.py 100

Under ``valgrind --tool=cachegrind --cache-sim=no``, the difference of the instruction
counts with 50 and 0 rounds, over 5,000, is the instructions per decision.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import statistics
import sys
import time
from typing import Any

import bench.decision as bench
from policies.engine import PolicyEngine
from policies.loader import load_routing

CAPTURE_AFTER = 1300      # decisions of the loop before the captured ones


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    captured: list[tuple[Any, Any, Any]] = []
    decide = PolicyEngine.decide
    seen = [0]

    def capturing(self: PolicyEngine, request: Any, views: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        if seen[0] > CAPTURE_AFTER:
            captured.append((self, request, views))
        return decide(self, request, views, **kwargs)

    PolicyEngine.decide = capturing  # type: ignore[method-assign]
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--workers", "10", "--decisions", "1100", "--warmup", "300",
                              "--complete", "--out", "unused"])
    bench.time_decisions(load_routing(args.routing), 10, args)
    PolicyEngine.decide = decide  # type: ignore[method-assign]
    gc.collect()
    gc.freeze()
    digest = hashlib.sha256()
    for engine, request, views in captured:
        made = engine.decide(request, views)
        digest.update(repr((made.worker_id, made.reason, sorted(made.attributes.items()),
                            made.candidates)).encode())
    per_decision: list[float] = []
    gc.disable()
    for _ in range(rounds):
        started = time.thread_time_ns()
        for engine, request, views in captured:
            engine.decide(request, views)
        per_decision.append((time.thread_time_ns() - started) / len(captured) / 1e3)
    gc.enable()
    per_decision.sort()
    if per_decision:
        print(f"decide µs/decision: min {per_decision[0]:.1f} "
              f"p10 {per_decision[len(per_decision) // 10]:.1f} "
              f"median {statistics.median(per_decision):.1f}")
    print(f"digest {digest.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
