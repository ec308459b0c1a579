"""The approximate index's insert and match with chains as tuples of ints and as
``array('Q')`` (what the blocks producer gives), alternating in one process: 3,000 chains
of 128 blocks (one of 50 shared 64-block trunks, then 64 blocks of their own) inserted for
10 workers, then 500 of them matched; four rounds, CPU µs per chain.

    taskset -c 1 python docs/benchmarks/token-aware/chain-arrays/insert_ab.py
"""

from __future__ import annotations

import gc
import random
import time
from array import array
from collections.abc import Sequence

from policies.prefix.approximate import ApproximatePrefixIndex

MASK_64 = (1 << 64) - 1


def as_chain(kind: str, hashes: list[int]) -> Sequence[int]:
    # fresh ints, as the producer made them for its tuples
    return tuple([h & MASK_64 for h in hashes]) if kind == "tuple" else array("Q", hashes)


def one_round(kind: str, requests: list[tuple[str, list[int]]],
              ids: list[str]) -> tuple[float, float]:
    index = ApproximatePrefixIndex(default_capacity_blocks=200_000)
    chains = [(worker, as_chain(kind, hashes)) for worker, hashes in requests]
    queries = [as_chain(kind, hashes) for _, hashes in requests[:500]]
    gc.collect()
    gc.disable()
    started = time.thread_time_ns()
    for worker, chain in chains:
        index.insert(worker, chain)
    insert_us = (time.thread_time_ns() - started) / 1e3 / len(chains)
    members = dict.fromkeys(ids, 0)
    started = time.thread_time_ns()
    for query in queries:
        index.match(query, members)
    match_us = (time.thread_time_ns() - started) / 1e3 / len(queries)
    gc.enable()
    return insert_us, match_us


def main() -> None:
    rng = random.Random(0)
    trunks = [[rng.getrandbits(64) for _ in range(64)] for _ in range(50)]
    ids = [f"w{i}" for i in range(10)]
    requests = [(rng.choice(ids), rng.choice(trunks) + [rng.getrandbits(64) for _ in range(64)])
                for _ in range(3000)]
    for _ in range(4):
        for kind in ("tuple", "array"):
            insert_us, match_us = one_round(kind, requests, ids)
            print(f"{kind}: insert {insert_us:.1f} µs, match {match_us:.1f} µs")


if __name__ == "__main__":
    main()
