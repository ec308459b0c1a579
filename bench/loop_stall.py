"""How long one oversized or odd request holds the router's event loop.

The router serves every connection from one event loop, so whatever a request costs on that
loop (reading and parsing its body, validating it, the producers that run inline) every other
client waits for. This starts ``kvroute up`` (the fleet file's emulated workers and the
router, each on a free loopback port; all stopped at the end) and, case by case, sends one
request ``--repeat`` times while a prober asks ``GET /health`` every 10 ms. A case's stall is
the longest ``/health`` round trip among the probes in flight while its request was: how long
the loop could not answer anyone else (0 when no probe was in flight, a request shorter than
the probes' spacing). Cases (``--cases``):

* ``chat``: a short chat request, for reference;
* ``token-ids``: a completion of 1,000,000 token ids (a 2.9 MB body);
* ``messages``: a chat of 50,000 short messages;
* ``text``: a completion of 3 MB of text;
* ``batch``: a completion of 1,000 prompts;
* ``surrogate``: a chat whose text holds an escaped lone surrogate (valid JSON);
* ``id-lists``: a completion of 7,000,000 one-token lists (27 MB), after one list too long
  for any window (each prompt of a batch is served on its own: this refusal keeps the
  emulated workers from serving seven million prompts);
* ``many-messages``: a chat of 1,100,000 empty messages (31 MB);
* ``responses-items``: a Responses API turn of 1,200,000 items (30 MB);
* ``empty-objects``: a completion with a field of 11,000,000 empty objects (31 MB; a
  field the router ignores: what costs is its parse);
* ``short-strings``: the same with 6,700,000 two-letter strings (32 MB);
* ``logprobs-answer``: a short chat whose answer is large: 8 choices of 400 tokens with 20
  top logprobs each (some 5 MB, not streamed).

The router's resident memory is read (``bench.proc_stats``) with each probe: a case's
memory is the most it grew over what it held before the request.

Prints a Markdown table and writes ``loop_stall.json`` to ``--out``.

    python -m bench.loop_stall --out out/loop-stall
    kvroute bench loop-stall --repeat 10 --cases token-ids,messages --out out/loop-stall
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.cases import chosen_cases
from bench.checks import range_problem, refusal, refuse
from bench.launch import (
    KvrouteUp,
    LaunchError,
    emulated_fleet,
    emulated_fleet_on_free_ports,
    wait_all_workers_healthy,
)
from bench.proc_stats import process_rss_bytes
from workers.project_files import project_path

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
PROBE_INTERVAL_S = 0.01
JSON_HEADERS = {"Content-Type": "application/json"}


def _body(payload: dict[str, Any]) -> bytes:
    return orjson.dumps(payload)


def _surrogate(model: str) -> bytes:
    # written by hand: no JSON encoder writes a lone surrogate, and a client's may send one
    return (b'{"model": ' + orjson.dumps(model) + b', "max_tokens": 2, "messages": '
            b'[{"role": "user", "content": "hello \\ud800 there"}]}')


@dataclass(frozen=True, slots=True)
class Case:
    key: str
    name: str
    path: str
    body: Callable[[str], bytes]       # the model's name -> the request body


CASES: tuple[Case, ...] = (
    Case("chat", "short chat (reference)", CHAT, lambda m: _body(
        {"model": m, "max_tokens": 2, "messages": [{"role": "user", "content": "Say hello."}]})),
    Case("token-ids", "1,000,000 token ids", COMPLETIONS, lambda m: _body(
        {"model": m, "max_tokens": 2, "prompt": [17] * 1_000_000})),
    Case("messages", "50,000 chat messages", CHAT, lambda m: _body(
        {"model": m, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}] * 50_000})),
    Case("text", "3 MB of text", COMPLETIONS, lambda m: _body(
        {"model": m, "max_tokens": 2, "prompt": "word " * 600_000})),
    Case("batch", "1,000 prompts in one request", COMPLETIONS, lambda m: _body(
        {"model": m, "max_tokens": 2, "prompt": ["hello world"] * 1_000})),
    Case("surrogate", "an escaped lone surrogate", CHAT, _surrogate),
    # bodies of millions of small items, near the 32 MiB body limit (cases of their own: each
    # request takes seconds of CPU, wherever it runs)
    # (the first list too long for any window: refused as parsed, none of them is served)
    Case("id-lists", "7,000,000 one-token lists", COMPLETIONS, lambda m: _body(
        {"model": m, "max_tokens": 2, "prompt": [[7] * 200_000] + [[7]] * 7_000_000})),
    Case("many-messages", "1,100,000 chat messages", CHAT, lambda m: _body(
        {"model": m, "max_tokens": 2, "messages": [{"role": "user", "content": ""}] * 1_100_000})),
    Case("responses-items", "1,200,000 Responses API items", RESPONSES, lambda m: _body(
        {"model": m, "max_output_tokens": 2, "input": [{"role": "u", "content": ""}] * 1_200_000})),
    Case("empty-objects", "11,000,000 empty objects", COMPLETIONS, lambda m: _body(
        {"model": m, "max_tokens": 2, "prompt": "hi", "x": [{}] * 11_000_000})),
    Case("short-strings", "6,700,000 short strings", COMPLETIONS, lambda m: _body(
        {"model": m, "max_tokens": 2, "prompt": "hi", "x": ["ab"] * 6_700_000})),
    # a large answer, not a large request: what the router reads of it on the way back
    Case("logprobs-answer", "an answer of 8 x 400 tokens with 20 top logprobs", CHAT,
         lambda m: _body({"model": m, "max_tokens": 400, "n": 8, "ignore_eos": True,
                          "logprobs": True, "top_logprobs": 20,
                          "messages": [{"role": "user", "content": "Tell me a story."}]})),
)


@dataclass(frozen=True, slots=True)
class CaseResult:
    key: str
    name: str
    body_bytes: int
    answer_bytes: int          # the largest answer's body
    statuses: list[int]
    request_s: list[float]     # each request's time, sent to answered
    stall_ms: list[float]      # each request's longest /health round trip meanwhile
    rss_growth_mb: list[float]  # each request's most the router's memory grew meanwhile


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fleet", type=Path, default=project_path("config/fleet.yaml"),
                        help="fleet file of emulated workers; their ports are replaced by free "
                             "ones (default config/fleet.yaml)")
    parser.add_argument("--routing", type=Path, default=project_path("config/routing.yaml"),
                        help="routing file (default config/routing.yaml)")
    parser.add_argument("--cases", default=",".join(c.key for c in CASES),
                        help="comma-separated cases, in order (default: all: %(default)s)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="requests per case (default %(default)s)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for loop_stall.json")


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    try:
        chosen_cases(str(args.cases), CASES)
    except ValueError as exc:
        return f"--cases: {exc}"
    problem = range_problem("--repeat", args.repeat, 1)
    if problem:
        return problem
    try:
        emulated_fleet(args.fleet)
    except ValueError as exc:
        return str(exc)
    return None


def run(args: argparse.Namespace) -> int:
    refused = refusal("loop-stall", args, check)
    if refused is not None:
        return refused
    cases = chosen_cases(str(args.cases), CASES)
    with tempfile.TemporaryDirectory(prefix="kvroute-loop-stall-") as tmp:
        try:
            fleet_path, model = _fleet_on_free_ports(args.fleet, Path(tmp))
        except ValueError as exc:
            return refuse("loop-stall", str(exc))
        try:
            with KvrouteUp(fleet_path, args.routing, Path(tmp)) as router:
                results = asyncio.run(_measure_all(router.base_url, router.pid, model, cases,
                                                   args.repeat))
        except LaunchError as exc:
            print(f"kvroute bench loop-stall: {exc}", file=sys.stderr)
            return 1
    report = {"fleet": str(args.fleet), "routing": str(args.routing), "repeat": args.repeat,
              "probe_interval_s": PROBE_INTERVAL_S,
              "cases": [asdict(r) for r in results]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "loop_stall.json").write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(results))
    return 0


def _fleet_on_free_ports(fleet: Path, folder: Path) -> tuple[Path, str]:
    """A copy of ``fleet`` whose emulated workers listen on free ports, and its first model
    (``ValueError`` as ``emulated_fleet_on_free_ports``)."""
    from workers.fleet import parse_fleet

    path, data = emulated_fleet_on_free_ports(fleet, folder)
    return path, parse_fleet(data, str(fleet)).workers[0].info.models[0]


async def _measure_all(base_url: str, pid: int, model: str, cases: Sequence[Case],
                       repeat: int) -> list[CaseResult]:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        await wait_all_workers_healthy(session, base_url)
        return [await _measure(session, base_url, pid, model, case, repeat)
                for case in cases]


async def _measure(session: Any, base_url: str, pid: int, model: str, case: Case,
                   repeat: int) -> CaseResult:
    body = case.body(model)
    statuses: list[int] = []
    request_s: list[float] = []
    stall_ms: list[float] = []
    rss_growth_mb: list[float] = []
    answer_bytes = 0
    for _ in range(repeat):
        probes: list[tuple[float, float]] = []      # (sent, answered), perf_counter seconds
        rss: list[int] = []                         # the router's, bytes
        stop = asyncio.Event()
        prober = asyncio.create_task(_probe(session, base_url, stop, probes))
        sampler = asyncio.create_task(_sample_rss(pid, stop, rss))
        await asyncio.sleep(5 * PROBE_INTERVAL_S)
        before = process_rss_bytes(pid)
        sent = time.perf_counter()
        async with session.post(base_url + case.path, data=body,
                                headers=JSON_HEADERS) as resp:
            answer_bytes = max(answer_bytes, len(await resp.read()))
            statuses.append(resp.status)
        answered = time.perf_counter()
        await asyncio.sleep(5 * PROBE_INTERVAL_S)
        stop.set()
        await prober
        await sampler
        overlapping = [end - start for start, end in probes if start < answered and end > sent]
        request_s.append(answered - sent)
        stall_ms.append(max(overlapping, default=0.0) * 1e3)
        rss_growth_mb.append(max(0, max(rss, default=before) - before) / 2**20)
    return CaseResult(case.key, case.name, len(body), answer_bytes, statuses, request_s,
                      stall_ms, rss_growth_mb)


async def _sample_rss(pid: int, stop: asyncio.Event, samples: list[int]) -> None:
    """The router's resident memory every ``PROBE_INTERVAL_S`` until ``stop`` (read from
    here, whatever its event loop is doing)."""
    while not stop.is_set():
        samples.append(process_rss_bytes(pid))
        await asyncio.sleep(PROBE_INTERVAL_S)


async def _probe(session: Any, base_url: str, stop: asyncio.Event,
                 probes: list[tuple[float, float]]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        async with session.get(base_url + "/health") as resp:
            await resp.read()
        probes.append((started, time.perf_counter()))
        await asyncio.sleep(PROBE_INTERVAL_S)


def markdown(results: Sequence[CaseResult]) -> str:
    lines = ["| case | body | answer | status | request s (median) | "
             "loop stall ms (median / max) | router memory growth MB (max) |",
             "|---|--:|--:|---|--:|--:|--:|"]
    for r in results:
        statuses = ", ".join(str(s) for s in sorted(set(r.statuses)))
        lines.append(f"| {r.name} | {_size(r.body_bytes)} | {_size(r.answer_bytes)} | "
                     f"{statuses} | "
                     f"{statistics.median(r.request_s):.3f} | "
                     f"{statistics.median(r.stall_ms):.0f} / {max(r.stall_ms):.0f} | "
                     f"{max(r.rss_growth_mb, default=0.0):.0f} |")
    return "\n".join(lines)


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 2**10:.0f} kB" if n >= 2**10 \
        else f"{n} B"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loop_stall", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
