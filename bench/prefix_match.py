"""Time of one approximate prefix-index match, and the index's bytes per block, by fleet size.

A shared-prefix workload fills an ``ApproximatePrefixIndex``: ``--requests`` chains, each a
``--prefix-blocks`` trunk drawn from ``--prefixes`` trunks followed by ``--tail-blocks``
blocks of its own, inserted for a worker drawn at random, so the trunks' blocks end up
held by many workers and the tails by one. Memory is ``tracemalloc``'s count over that
filling, divided by the blocks the workers hold. Each chain is inserted as the blocks
producer gives it, an ``array('Q')``, whose hashes become int objects as the index reads
them, so the ints the index keeps as its keys count in its bytes. Then
``--queries`` new chains of the same shape are matched against every worker (the ids as a
dict, as the prefix scorer passes them), ``--repeat`` times; the best pass gives the time
per match (the thread's CPU time).
Inserting is timed too (CPU per chain), by the same inserts into a second index without
``tracemalloc``.

Writes ``prefix_match.json`` to ``--out`` and prints a Markdown table::

    taskset -c 1 python -m bench.prefix_match --workers 10,64,1000 --out DIR
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
import tracemalloc
from array import array
from pathlib import Path
from typing import Any

from bench.checks import first_problem, int_list, int_list_problem, range_problem, refusal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", default="10,64,1000",
                        help="comma-separated fleet sizes (default 10,64,1000)")
    parser.add_argument("--requests", type=int, default=4000,
                        help="chains inserted before timing (default 4000)")
    parser.add_argument("--queries", type=int, default=2000, help="matches timed per pass")
    parser.add_argument("--repeat", type=int, default=5, help="timed passes; the best counts")
    parser.add_argument("--prefixes", type=int, default=50, help="distinct trunks")
    parser.add_argument("--prefix-blocks", type=int, default=64,
                        help="blocks per trunk, the shared prefix of each chain "
                             "(default %(default)s)")
    parser.add_argument("--tail-blocks", type=int, default=64,
                        help="blocks unique to each chain, after its trunk (default %(default)s)")
    parser.add_argument("--capacity-blocks", type=int, default=20_000,
                        help="each worker's LRU capacity (default 20000)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the trunks, the chains, their workers and the queries "
                             "(default %(default)s)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for prefix_match.json")


def measure(workers: int, args: argparse.Namespace) -> dict[str, Any]:
    """One fleet size: µs per match (best pass) and bytes per held block."""
    from policies.prefix.approximate import ApproximatePrefixIndex

    rng = random.Random(args.seed)
    ids = [f"w{i}" for i in range(workers)]
    trunks = [[rng.getrandbits(64) for _ in range(args.prefix_blocks)]
              for _ in range(args.prefixes)]

    def chain() -> list[int]:
        return rng.choice(trunks) + [rng.getrandbits(64) for _ in range(args.tail_blocks)]

    stored = [array("Q", chain()) for _ in range(args.requests)]
    owners = [rng.choice(ids) for _ in range(args.requests)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index = ApproximatePrefixIndex(default_capacity_blocks=args.capacity_blocks)
    for worker_id, packed in zip(owners, stored, strict=True):
        index.insert(worker_id, packed)
    index_bytes = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    held = index.total_blocks()
    # the same inserts again, timed, into an index of their own (tracemalloc slows them)
    gc.collect()
    timed = ApproximatePrefixIndex(default_capacity_blocks=args.capacity_blocks)
    started = time.thread_time_ns()
    for worker_id, packed in zip(owners, stored, strict=True):
        timed.insert(worker_id, packed)
    insert_us = (time.thread_time_ns() - started) / 1e3 / len(stored)
    members = dict.fromkeys(ids, 0)
    queries = [array("Q", chain()) for _ in range(args.queries)]
    gc.collect()
    passes = []
    for _ in range(args.repeat):
        started = time.thread_time_ns()
        for query in queries:
            index.match(query, members)
        passes.append((time.thread_time_ns() - started) / 1e3 / len(queries))
    return {"workers": float(workers), "match_us": min(passes), "insert_us": insert_us,
            "match_us_passes": passes,
            "blocks_held": float(held), "distinct_blocks": float(index.distinct_blocks()),
            "bytes_per_block": index_bytes / held if held else 0.0}


def markdown(sizes: list[dict[str, Any]]) -> str:
    lines = ["| workers | match µs (best pass) | insert µs per chain | blocks held "
             "| distinct blocks | bytes / block |", "|---|---|---|---|---|---|"]
    for size in sizes:
        lines.append(f"| {size['workers']:.0f} | {size['match_us']:.1f} | "
                     f"{size['insert_us']:.1f} | "
                     f"{size['blocks_held']:,.0f} | {size['distinct_blocks']:,.0f} | "
                     f"{size['bytes_per_block']:.0f} |")
    return "\n".join(lines)


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    problem = first_problem(
        int_list_problem("--workers", args.workers, 1),
        range_problem("--requests", args.requests, 1),
        range_problem("--queries", args.queries, 1),
        range_problem("--repeat", args.repeat, 1),
        range_problem("--prefixes", args.prefixes, 1),
        range_problem("--prefix-blocks", args.prefix_blocks, 0),
        range_problem("--tail-blocks", args.tail_blocks, 0),
        range_problem("--capacity-blocks", args.capacity_blocks, 1))
    if problem is None and args.prefix_blocks + args.tail_blocks < 1:
        return "--prefix-blocks + --tail-blocks: must be >= 1 (blocks per chain), got 0"
    return problem


def run(args: argparse.Namespace) -> int:
    refused = refusal("prefix-match", args, check)
    if refused is not None:
        return refused
    fleet_sizes = int_list(args.workers)
    sizes = []
    for workers in fleet_sizes:
        print(f"[prefix-match] {workers} workers", file=sys.stderr, flush=True)
        sizes.append(measure(workers, args))
    report = {"requests": args.requests, "queries": args.queries, "repeat": args.repeat,
              "prefixes": args.prefixes, "prefix_blocks": args.prefix_blocks,
              "tail_blocks": args.tail_blocks, "capacity_blocks": args.capacity_blocks,
              "python": sys.version.split()[0], "sizes": sizes}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prefix_match.json").write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(sizes))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.prefix_match", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
