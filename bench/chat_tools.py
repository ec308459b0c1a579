"""CPU time of the ``tokens`` producer per request for an agent's chats offering tools.

An agent sends the same tools with every turn of its conversation, and the producer writes
them into the prompt as the chat template does (each tool's JSON, indented: Python's
``json.dumps`` with an indent, which runs in pure Python). This times ``produce`` (the
thread's CPU clock) for ``--requests`` chats, each a system message and a new user message
offering the same ``--tools`` tools, twice: as the producer runs
(``ToolsTextCache``: the tools' text written once, then found by the tools' JSON), and with
the text written for every request (``write_tools``), as it was before the cache. A third
row times the same chats without tools, for what the tools cost above a plain chat.

Writes ``chat_tools.json`` to ``--out`` and prints a Markdown table.

    python -m bench.chat_tools --tools 30 --requests 500 --out out/chat-tools
    kvroute bench chat-tools --tools 30 --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.checks import first_problem, range_problem, refusal

ROWS = ("tools, written once", "tools, written each time", "no tools")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tools", type=int, default=30,
                        help="tools offered by every chat (default %(default)s)")
    parser.add_argument("--requests", type=int, default=500,
                        help="chats timed per row (default %(default)s)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for chat_tools.json")


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    return first_problem(range_problem("--tools", args.tools, 1),
                         range_problem("--requests", args.requests, 1))


def agent_tools(count: int) -> list[dict[str, Any]]:
    """``count`` tools shaped as agents' are (a description, typed parameters, an enum)."""
    return [{"type": "function", "function": {
        "name": f"get_weather_{i}",
        "description": "Get the current weather for a city, in the unit asked for.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "the city's name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}} for i in range(count)]


def run(args: argparse.Namespace) -> int:
    from policies.producers.chat_template import write_tools
    from policies.producers.tokens import TokensParams, TokensProducer

    refused = refusal("chat-tools", args, check)
    if refused is not None:
        return refused
    tools = agent_tools(args.tools)
    rows: dict[str, dict[str, float | None]] = {}
    for row in ROWS:
        producer = TokensProducer("tokens", TokensParams(), {})
        if row == "tools, written each time":
            producer.tools_text = write_tools        # the path before the cache
        offered = None if row == "no tools" else tools
        for turn in range(20):                      # warm: tokenizer, the token cache
            _produce_us(producer, offered, f"warm {turn}")
        times = [_produce_us(producer, offered, f"turn {turn}") for turn in range(args.requests)]
        rows[row] = _summary(times)
        print(f"[chat-tools] {row}: done", file=sys.stderr, flush=True)
    report = {"tools": args.tools, "requests": args.requests,
              "tools_json_bytes": len(json.dumps(tools)), "rows": rows,
              "python": sys.version.split()[0]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "chat_tools.json").write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report))
    return 0


def _produce_us(producer: Any, tools: list[dict[str, Any]] | None, text: str) -> float:
    from policies.base import RoutingRequest

    request = RoutingRequest(request_id=text, model="m", tools=tools, messages=[
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": f"What is the weather like? ({text})"}])
    started = time.thread_time_ns()
    producer.produce(request, [])
    return (time.thread_time_ns() - started) / 1e3


def _summary(times_us: list[float]) -> dict[str, float | None]:
    from bench.stats import percentile

    return {"p50_us": percentile(times_us, 50), "p99_us": percentile(times_us, 99),
            "mean_us": statistics.fmean(times_us) if times_us else None}


def markdown(report: dict[str, Any]) -> str:
    lines = [f"{report['requests']} chats per row, {report['tools']} tools "
             f"({report['tools_json_bytes']:,} bytes of JSON)", "",
             "| chats | p50 µs | p99 µs | mean µs |", "|---|---|---|---|"]
    for row, times in report["rows"].items():
        lines.append(f"| {row} | {_us(times['p50_us'])} | {_us(times['p99_us'])} "
                     f"| {_us(times['mean_us'])} |")
    return "\n".join(lines)


def _us(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chat_tools",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
