"""What the router's long-lived prefix structures add to a full garbage collection.

A full collection walks every tracked container still alive, item by item, and the router's
event loop stands still meanwhile. The prefix structures the router keeps for as long as it
runs hold hundreds of thousands of block hashes. Each is built here at a size a fleet gives
it, one at a time, and a full ``gc.collect()`` is timed with it (best of ``--repeat``)
against one just before it was built; the difference is what it adds:

* ``approximate``: the approximate prefix index, ``--workers`` LRUs of ``--blocks`` blocks
  each (chains of 128 blocks inserted until full);
* ``exact``: the KV-event index holding the same number of blocks per worker;
* ``ceiling``: the infinite-cache prefix ceiling at its capacity (``--ceiling-blocks``).

Writes ``gc_walk.json`` to ``--out`` and prints a Markdown table::

    taskset -c 1 python -m bench.gc_walk --out DIR
    kvroute bench gc-walk --workers 10 --blocks 29000 --out DIR
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.checks import first_problem, range_problem, refusal

CHAIN_BLOCKS = 128


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=10,
                        help="workers of the indexes (default %(default)s)")
    parser.add_argument("--blocks", type=int, default=29_000,
                        help="blocks each worker's index holds: an H100's KV cache of "
                             "Llama-3.1-8B (default %(default)s)")
    parser.add_argument("--ceiling-blocks", type=int, default=None,
                        help="the prefix ceiling's capacity (default: the router's)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="full collections timed per structure; the best counts "
                             "(default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the block hashes")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for gc_walk.json")


def full_collection_ms(repeat: int) -> float:
    """The best of ``repeat`` full collections, in ms (one untimed first)."""
    gc.collect()
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        gc.collect()
        best = min(best, time.perf_counter() - started)
    return best * 1e3


def _chains(rng: random.Random, blocks: int) -> list[tuple[int, ...]]:
    """``blocks`` random block hashes, in chains of ``CHAIN_BLOCKS`` (the last one shorter)."""
    return [tuple(rng.getrandbits(64) for _ in range(min(CHAIN_BLOCKS, blocks - start)))
            for start in range(0, blocks, CHAIN_BLOCKS)]


def build_approximate(workers: int, blocks: int, rng: random.Random) -> Any:
    from policies.prefix.approximate import ApproximatePrefixIndex

    index = ApproximatePrefixIndex(default_capacity_blocks=blocks)
    for w in range(workers):
        for chain in _chains(rng, blocks):
            index.insert(f"w{w}", chain)
    return index


def build_exact(workers: int, blocks: int, rng: random.Random) -> Any:
    from workers.engine.api import BlockStored
    from workers.kv_events.decode import KvEventBatch
    from workers.kv_events.exact_index import ExactPrefixIndex

    index = ExactPrefixIndex()
    for w in range(workers):
        for seq, chain in enumerate(_chains(rng, blocks)):
            index.on_batch(f"w{w}", seq, KvEventBatch(ts=0.0, events=(BlockStored(
                block_hashes=chain, parent_block_hash=None, token_ids=(), block_size=16),)))
    return index


def build_ceiling(capacity: int, rng: random.Random) -> Any:
    from router.metrics import RouterMetrics
    from router.prefix_ceiling import PrefixCeiling

    ceiling = PrefixCeiling(RouterMetrics(), capacity)
    for chain in _chains(rng, capacity):
        ceiling.observe(chain, 16)
    return ceiling


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    from router.prefix_ceiling import DEFAULT_CAPACITY

    ceiling_blocks = args.ceiling_blocks or DEFAULT_CAPACITY
    builders: list[tuple[str, int, Callable[[random.Random], Any]]] = [
        ("approximate", args.workers * args.blocks,
         lambda rng: build_approximate(args.workers, args.blocks, rng)),
        ("exact", args.workers * args.blocks,
         lambda rng: build_exact(args.workers, args.blocks, rng)),
        ("ceiling", ceiling_blocks, lambda rng: build_ceiling(ceiling_blocks, rng)),
    ]
    rows = []
    for name, blocks, build in builders:
        print(f"[gc-walk] {name}: {blocks} blocks", file=sys.stderr, flush=True)
        without = full_collection_ms(args.repeat)
        structure = build(random.Random(args.seed))
        with_it = full_collection_ms(args.repeat)
        del structure
        rows.append({"structure": name, "blocks": blocks, "without_ms": without,
                     "with_ms": with_it, "added_ms": with_it - without})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| structure | blocks | full collection without, ms | with, ms | added, ms |",
             "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['structure']} | {row['blocks']:,} | {row['without_ms']:.2f} "
                     f"| {row['with_ms']:.2f} | {row['added_ms']:.2f} |")
    return "\n".join(lines)


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    return first_problem(range_problem("--workers", args.workers, 1),
                         range_problem("--blocks", args.blocks, 1),
                         range_problem("--ceiling-blocks", args.ceiling_blocks, 1),
                         range_problem("--repeat", args.repeat, 1))


def run(args: argparse.Namespace) -> int:
    refused = refusal("gc-walk", args, check)
    if refused is not None:
        return refused
    rows = measure(args)
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"workers": args.workers, "blocks_per_worker": args.blocks,
              "repeat": args.repeat, "python": sys.version.split()[0], "structures": rows}
    (args.out / "gc_walk.json").write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gc_walk", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
