"""Semantic classification latency: open-loop Poisson arrivals through the semantic producer.

Loads a routing file's ``semantic:`` section (default ``config/examples/semantic.yaml``),
trains its classifier, then sends ``--rate`` requests per second for ``--duration`` seconds
through ``SemanticProducer.produce_async`` on one asyncio loop, exactly as the router does
(the embedding thread micro-batches concurrent requests). Each request is a chat message
drawn from ``--data`` (cut to ``--max-prompt-tokens`` model tokens) behind a unique request
number, so no request hits the embedding cache: the numbers are the uncached cost. The latency of a
request is from its arrival to its class being set.

Pin it to one core for the one-core figure::

    taskset -c 1 .venv/bin/python -m bench.semantic --rate 50 --duration 20 --out bench-out/semantic

Writes ``semantic.json`` (settings, percentiles, batch sizes, accuracy on the sent prompts)
and ``semantic.png`` (latency over time and its distribution) under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.checks import first_problem, range_problem, refusal, refuse

DEFAULT_ROUTING = Path("config/examples/semantic.yaml")
DEFAULT_DATA = Path("config/examples/semantic-eval/heldout.jsonl")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--routing", type=Path, default=DEFAULT_ROUTING,
                        help="routing file whose semantic: section is trained and timed "
                             "(default %(default)s)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="JSONL of {text, label}: the prompts to send")
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load")
    parser.add_argument("--max-prompt-tokens", type=int, default=512,
                        help="cut each prompt to this many tokens before sending")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="override the section's max_tokens (tokens the embedder reads)")
    parser.add_argument("--quantize", action="store_true",
                        help="override the section's quantize with true (int8, text by text)")
    parser.add_argument("--runtime", choices=("torch", "onnx"), default=None,
                        help="override the section's runtime (what runs the encoder)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the Poisson arrival times (default %(default)s)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for semantic.json and semantic.png")


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``): checked before the
    embedding model loads."""
    problem = first_problem(
        range_problem("--rate", args.rate, 0, inclusive=False),
        range_problem("--duration", args.duration, 0, inclusive=False),
        range_problem("--max-prompt-tokens", args.max_prompt_tokens, 1),
        range_problem("--max-tokens", args.max_tokens, 1))
    if problem:
        return problem
    if int(args.rate * args.duration) < 1:
        return (f"--rate x --duration: must send one request at least, got "
                f"{args.rate:g}/s for {args.duration:g} s")
    if not args.data.is_file():
        return f"--data: {args.data}: no such file"
    return None


def run(args: argparse.Namespace) -> int:
    from policies.errors import RoutingConfigError

    refused = refusal("semantic", args, check)
    if refused is not None:
        return refused
    try:
        result = asyncio.run(_bench(args))
    except RoutingConfigError as exc:
        return refuse("semantic", str(exc))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "semantic.json").write_text(json.dumps(result, indent=2))
    _plot(result, args.out / "semantic.png")
    summary = result["latency_ms"]
    print(f"{result['requests']} requests at {args.rate:g}/s on CPUs {result['cpus']}: "
          f"p50 {summary['p50']:.2f} ms, p90 {summary['p90']:.2f} ms, "
          f"p99 {summary['p99']:.2f} ms, max {summary['max']:.2f} ms; "
          f"mean batch {result['mean_batch']:.2f}; embedding CPU "
          f"{result['embed_cpu_ms_per_request']:.2f} ms/request; "
          f"cache hits {result['cache_hits']}; "
          f"outcomes {result['outcomes']}; "
          f"accuracy {100 * result['accuracy']:.1f}%; load average {result['load_average']}")
    print(f"wrote {args.out / 'semantic.json'} and {args.out / 'semantic.png'}")
    return 0


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    from tqdm import tqdm

    from policies.base import RoutingRequest
    from policies.errors import RoutingConfigError
    from policies.loader import load_routing
    from policies.semantic.model import build_semantic_model, read_labelled_jsonl
    from policies.semantic.producer import SemanticProducer
    from policies.semantic.section import SECTION_NAME

    section = load_routing(args.routing).section(SECTION_NAME)
    if section is None:
        raise RoutingConfigError(f"{args.routing}: no semantic: section")
    # the prompts are read before the model loads: a bad file fails in a second
    rows = read_labelled_jsonl(args.data, "--data")
    if not rows:
        raise RoutingConfigError(f"--data: {args.data}: no rows")
    if args.max_tokens is not None:
        section = dataclasses.replace(section, max_tokens=args.max_tokens)
    if args.quantize:
        section = dataclasses.replace(section, quantize=True)
    if args.runtime is not None:
        section = dataclasses.replace(section, runtime=args.runtime)
    model = build_semantic_model(section, args.routing.resolve().parent)
    producer = SemanticProducer("semantic", model)
    tokenizer: Any = getattr(model.embedder, "_tokenizer", None)
    prompts = [(_cut(text, tokenizer, args.max_prompt_tokens), label) for text, label in rows]
    rng = random.Random(args.seed)
    total = int(args.rate * args.duration)
    latencies: list[float] = [0.0] * total
    sent_at: list[float] = [0.0] * total
    correct = 0
    outcomes: dict[str, int] = {}
    progress = tqdm(total=total, desc="semantic", unit="req", file=sys.stderr)

    async def one(i: int, text: str, label: str) -> None:
        nonlocal correct
        request = RoutingRequest(request_id=str(i), model="auto",
                                 messages=[{"role": "user", "content": text}])
        start = time.perf_counter()
        await producer.produce_async(request, ())
        latencies[i] = time.perf_counter() - start
        correct += request.semantic_class == label
        outcome = str(request.attributes.get("semantic_outcome"))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        progress.update()

    tasks: list[asyncio.Task[None]] = []
    begin = time.perf_counter()
    next_at = begin
    for i in range(total):
        next_at += rng.expovariate(args.rate)
        delay = next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        text, label = prompts[i % len(prompts)]
        sent_at[i] = time.perf_counter() - begin
        tasks.append(asyncio.create_task(one(i, f"#{i}: {text}", label)))
    await asyncio.gather(*tasks)
    progress.close()
    stats = model.batcher.stats
    producer.close()
    ms = np.array(latencies) * 1000.0
    return {
        "routing": str(args.routing), "data": str(args.data), "rate": args.rate,
        "duration_s": args.duration, "requests": total, "cpus": sorted(os.sched_getaffinity(0)),
        "max_prompt_tokens": args.max_prompt_tokens, "max_tokens": section.max_tokens,
        "quantize": section.quantize, "runtime": section.runtime,
        "batch_window_ms": section.batch.window_ms,
        "latency_ms": {"p50": float(np.percentile(ms, 50)), "p90": float(np.percentile(ms, 90)),
                       "p99": float(np.percentile(ms, 99)), "mean": float(ms.mean()),
                       "max": float(ms.max())},
        "outcomes": outcomes, "load_average": os.getloadavg(),
        "embed_cpu_ms_per_request": 1000.0 * stats.cpu_s / max(1, stats.texts),
        "cache_hits": model.batcher.cache.hits, "batches": stats.batches,
        "mean_batch": stats.texts / max(1, stats.batches),
        "largest_batch": stats.largest_batch, "accuracy": correct / total,
        "classifier": model.report.summary(),
        "series": {"sent_at_s": sent_at, "latency_ms": ms.tolist()},
    }


def _cut(text: str, tokenizer: Any, max_tokens: int) -> str:
    """``text`` cut to at most ``max_tokens`` tokens of the embedding model's tokenizer."""
    if tokenizer is None:
        return text
    ids = tokenizer(text, add_special_tokens=False, truncation=True,
                    max_length=max_tokens)["input_ids"]
    return str(tokenizer.decode(ids))


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = result["series"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(series["sent_at_s"], series["latency_ms"], ".", markersize=2)
    left.set_xlabel("arrival (s)")
    left.set_ylabel("classification latency (ms)")
    left.set_title(f"{result['rate']:g} req/s, CPUs {result['cpus']}")
    values: Sequence[float] = sorted(series["latency_ms"])
    right.plot(values, [(i + 1) / len(values) for i in range(len(values))])
    right.set_xlabel("latency (ms)")
    right.set_ylabel("CDF")
    lat = result["latency_ms"]
    right.set_title(f"p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.semantic", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
