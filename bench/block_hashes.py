"""CPU time of the ``blocks`` producer per request, over a trace's prompts in arrival order.

The router hashes every prompt into vLLM's chained block hashes before it decides
(``policies.producers.blocks``). This replays a trace's prompts (Mooncake: token ids built
from its 512-token block ids, so that conversations share their earlier turns as in the
trace) through one producer, in order, as the ``array('i')`` the tokens producer gives a
text, and times ``produce`` per request with the thread's CPU clock. It reports the time per
request (p50, p90, p99, mean), per 1,000 prompt tokens, and the share of blocks the producer
found remembered instead of hashing them. With ``--again`` every prompt is produced a second
time right after its first, and that second call (every block remembered, when the producer
remembers) is reported on its own row.

Writes ``block_hashes.json`` to ``--out`` and prints a Markdown table.

    python -m bench.block_hashes --trace ../shared/traces/mooncake_conversation_trace.jsonl.gz \\
        --limit 2000 --out out/block-hashes
    kvroute bench block-hashes --trace TRACE --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from array import array
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.checks import first_problem, range_problem, refusal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", type=Path, required=True,
                        help="Mooncake JSONL or Azure CSV trace, gzipped or not")
    parser.add_argument("--limit", type=int, default=2000,
                        help="the trace's first N requests (default 2000)")
    parser.add_argument("--algo", default="sha256", help="block hash (default sha256)")
    parser.add_argument("--block-size", type=int, default=16,
                        help="tokens per hashed block, the workers' KV block size "
                             "(default %(default)s)")
    parser.add_argument("--again", action="store_true",
                        help="produce every prompt a second time and report those calls apart")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for block_hashes.json")


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    from workers.engine.block_hash import HASH_ALGOS

    if args.algo not in HASH_ALGOS:
        return f"--algo: must be one of {', '.join(HASH_ALGOS)}, got {args.algo!r}"
    return first_problem(range_problem("--limit", args.limit, 0, inclusive=False),
                         range_problem("--block-size", args.block_size, 1))


def run(args: argparse.Namespace) -> int:
    from policies.producers.blocks import BlocksParams, BlocksProducer
    from sim.traces import load_trace
    from workers.models import WorkerView

    refused = refusal("block-hashes", args, check)
    if refused is not None:
        return refused
    trace = load_trace(args.trace, limit=args.limit)
    producer = BlocksProducer("blocks", BlocksParams(algo=args.algo))
    view: Any = _View(args.block_size)
    views: list[WorkerView] = [view]
    times_us: list[float] = []
    again_us: list[float] = []
    tokens_total = 0
    step = max(1, len(trace.requests) // 20)
    looked_up = hashed = 0      # blocks of the first calls found remembered, and hashed
    for n, row in enumerate(trace.requests):
        tokens = trace.prompt_token_ids(row)
        before = _memo_counts(producer, args.block_size)
        times_us.append(_produce_us(producer, tokens, views, str(n)))
        after = _memo_counts(producer, args.block_size)
        looked_up += after[0] - before[0]
        hashed += after[1] - before[1]
        if args.again:
            again_us.append(_produce_us(producer, tokens, views, f"{n}-again"))
        tokens_total += len(tokens)
        if n % step == 0:
            print(f"[block-hashes] {n}/{len(trace.requests)}", file=sys.stderr, flush=True)
    remembered = looked_up / (looked_up + hashed) if looked_up + hashed else None
    report = {
        "trace": str(args.trace), "requests": len(times_us), "algo": args.algo,
        "block_size": args.block_size, "prompt_tokens": tokens_total,
        **_summary(times_us, tokens_total),
        "blocks_remembered": remembered,       # of the first calls; None: nothing remembers
        "again": _summary(again_us, tokens_total) if args.again else None,
        "memo_bytes_per_block": memo_bytes_per_block(args.algo, args.block_size),
        "python": sys.version.split()[0],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "block_hashes.json").write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report))
    return 0


def memo_bytes_per_block(algo: str, block_size: int, blocks: int = 8192) -> float | None:
    """Bytes a producer's memo holds per remembered block (``tracemalloc`` around hashing
    ``blocks`` blocks of random prompts); None for a producer that remembers none."""
    import random
    import tracemalloc

    from policies.producers.blocks import BlocksParams, BlocksProducer

    rng = random.Random(0)
    prompts = [[rng.randrange(100_000) for _ in range(block_size * 128)]
               for _ in range(blocks // 128)]
    producer = BlocksProducer("blocks", BlocksParams(algo=algo))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for tokens in prompts:
            producer.chain(tokens, block_size)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    memo = getattr(producer, "memos", {}).get(block_size)
    return held / len(memo) if memo is not None and len(memo) else None


def _memo_counts(producer: Any, block_size: int) -> tuple[int, int]:
    """(blocks looked up, blocks hashed) so far by the producer's memo of ``block_size``;
    (0, 0) for a producer without one."""
    memo = getattr(producer, "memos", {}).get(block_size)
    return (0, 0) if memo is None else (memo.looked_up, memo.hashed)


def _produce_us(producer: Any, tokens: list[int], views: Any, request_id: str) -> float:
    from policies.base import RoutingRequest

    request = RoutingRequest(request_id=request_id, model="m")
    request.prompt_token_ids = array("i", tokens)    # what the tokens producer gives a text
    request.num_prompt_tokens = len(tokens)
    started = time.thread_time_ns()
    producer.produce(request, views)
    return (time.thread_time_ns() - started) / 1e3


def _summary(times_us: list[float], tokens_total: int) -> dict[str, float | None]:
    from bench.stats import percentile

    return {"p50_us": percentile(times_us, 50), "p90_us": percentile(times_us, 90),
            "p99_us": percentile(times_us, 99),
            "mean_us": statistics.fmean(times_us) if times_us else None,
            "us_per_1k_tokens": sum(times_us) / max(1, tokens_total) * 1e3}


def markdown(report: dict[str, Any]) -> str:
    """A table: every prompt's first call, then (``--again``) the second calls."""
    remembered = report["blocks_remembered"]
    lines = ["| calls | requests | prompt tokens | p50 µs | p90 µs | p99 µs | mean µs "
             "| µs / 1k tokens | blocks remembered |",
             "|---|---|---|---|---|---|---|---|---|",
             _row("first", report, report,
                  "–" if remembered is None else f"{remembered:.1%}")]
    if report.get("again"):
        lines.append(_row("again", report, report["again"], ""))
    return "\n".join(lines)


def _row(label: str, report: dict[str, Any], times: dict[str, Any], remembered: str) -> str:
    return (f"| {label} | {report['requests']} | {report['prompt_tokens']:,} "
            f"| {_us(times['p50_us'])} | {_us(times['p90_us'])} | {_us(times['p99_us'])} "
            f"| {_us(times['mean_us'])} | {times['us_per_1k_tokens']:.1f} | {remembered} |")


def _us(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


class _View:
    """The fields of a worker view the producer reads: its block size, and what it serves
    (no model, no LoRA adapter: the prompts are hashed as a base model's)."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.info = SimpleNamespace(models=())
        self.lora_adapters: tuple[str, ...] = ()
        self.lora_paths: tuple[tuple[str, str], ...] = ()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.block_hashes",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
