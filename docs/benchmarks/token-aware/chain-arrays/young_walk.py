"""One young collection with 130 young chains of 128 hashes each, as tuples of ints and as
``array('Q')``, the cache flushed first (a 256 MB buffer touched), five times each.

    taskset -c 1 python docs/benchmarks/token-aware/chain-arrays/young_walk.py
"""

from __future__ import annotations

import gc
import random
import time
from array import array

FLUSH = bytearray(256 << 20)


def flush_cache() -> None:
    for i in range(0, len(FLUSH), 64):
        FLUSH[i] = 1


def young_collection_us(kind: str, chains: int = 130) -> float:
    kept = []
    for _ in range(chains):      # each chain's ints made among others', as requests come
        hashes = [random.getrandbits(64) for _ in range(128)]
        others = [random.getrandbits(64) for _ in range(500)]
        kept.append((hashes, others))
    gc.collect()
    young = [tuple(list(h)) if kind == "tuple" else array("Q", h) for h, _ in kept]
    flush_cache()
    started = time.thread_time_ns()
    gc.collect(0)
    elapsed = (time.thread_time_ns() - started) / 1e3
    del young
    return elapsed


def main() -> None:
    gc.disable()
    for kind in ("tuple", "array", "tuple", "array"):
        runs = sorted(young_collection_us(kind) for _ in range(5))
        print(kind, " ".join(f"{us:.0f}" for us in runs), "µs")


if __name__ == "__main__":
    main()
