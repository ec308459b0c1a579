"""HTTP load generator for OpenAI-style endpoints: closed or open loop, streamed or not.

Run as its own process so that it never shares an interpreter with what it measures::

    python -m bench.loadgen SPEC.json            # prints a JSON LoadResult on stdout

or in-process with ``await run_load(spec)``. Closed loop keeps ``concurrency`` requests in
flight for ``duration_s`` (or ``max_requests``); open loop starts requests at ``rate`` per
second (Poisson arrivals, seeded) whatever the responses do. For streams it records the time
to the first ``data:`` event (TTFC) and to the end; a stream counts as complete only when it
delivered ``[DONE]``. The request body is serialised once and sent as bytes.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import orjson

from bench.stats import ms, percentile

LoopMode = Literal["closed", "open"]
_MAX_OPEN_INFLIGHT = 4096


@dataclass(frozen=True, slots=True)
class LoadSpec:
    url: str                                   # full endpoint URL
    body: dict[str, Any]
    stream: bool = False
    mode: LoopMode = "closed"
    concurrency: int = 32
    rate: float = 100.0                        # open loop: arrivals per second
    duration_s: float = 5.0
    max_requests: int = 1_000_000
    timeout_s: float = 30.0
    headers: dict[str, str] = field(default_factory=dict)
    seed: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LoadSpec:
        return cls(**data)


@dataclass(slots=True)
class RequestResult:
    status: int                  # HTTP status; 0 when the connection failed
    ok: bool                     # 2xx and, for streams, [DONE] seen
    latency_s: float
    ttfc_s: float | None = None  # streams: first data: event
    events: int = 0              # streams: data: events
    worker: str | None = None    # x-kvroute-worker, when present
    error: str | None = None


@dataclass(slots=True)
class LoadResult:
    completed: int
    errors: int
    elapsed_s: float
    requests_per_s: float
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    ttfc_p50_ms: float | None = None
    ttfc_p99_ms: float | None = None
    mean_events: float | None = None
    first_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def send_one(session: aiohttp.ClientSession, url: str, payload: bytes, stream: bool,
                   headers: dict[str, str] | None = None) -> RequestResult:
    """One POST; reads the whole response and times it."""
    start = time.perf_counter()
    ttfc: float | None = None
    events = 0
    done = False
    try:
        async with session.post(url, data=payload, headers=headers) as response:
            worker = response.headers.get("x-kvroute-worker")
            if not stream:
                await response.read()
                ok = 200 <= response.status < 300
                return RequestResult(response.status, ok, time.perf_counter() - start,
                                     worker=worker,
                                     error=None if ok else f"HTTP {response.status}")
            async for chunk in response.content.iter_any():
                count = chunk.count(b"data:")
                if count and ttfc is None:
                    ttfc = time.perf_counter() - start
                events += count
                if b"[DONE]" in chunk:
                    done = True
            ok = 200 <= response.status < 300 and done
            return RequestResult(response.status, ok, time.perf_counter() - start, ttfc,
                                 events, worker,
                                 None if ok else f"HTTP {response.status}, done={done}")
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return RequestResult(0, False, time.perf_counter() - start, ttfc, events,
                             error=f"{type(exc).__name__}: {exc}")


def summarize(results: list[RequestResult], elapsed_s: float) -> LoadResult:
    good = [r for r in results if r.ok]
    bad = [r for r in results if not r.ok]
    latencies = [r.latency_s for r in good]
    ttfcs = [r.ttfc_s for r in good if r.ttfc_s is not None]
    return LoadResult(
        completed=len(good), errors=len(bad), elapsed_s=round(elapsed_s, 3),
        requests_per_s=round(len(good) / elapsed_s, 1) if elapsed_s > 0 else 0.0,
        latency_p50_ms=ms(percentile(latencies, 50)), latency_p99_ms=ms(percentile(latencies, 99)),
        ttfc_p50_ms=ms(percentile(ttfcs, 50)), ttfc_p99_ms=ms(percentile(ttfcs, 99)),
        mean_events=round(sum(r.events for r in good) / len(good), 2) if good and ttfcs else None,
        first_error=bad[0].error if bad else None)


async def run_load(spec: LoadSpec) -> LoadResult:
    payload = orjson.dumps(spec.body)
    headers = {"content-type": "application/json", **spec.headers}
    timeout = aiohttp.ClientTimeout(total=spec.timeout_s)
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None)
    results: list[RequestResult] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     headers=headers) as session:
        start = time.perf_counter()
        deadline = start + spec.duration_s
        if spec.mode == "closed":
            await _closed_loop(session, spec, payload, deadline, results)
        else:
            await _open_loop(session, spec, payload, deadline, results)
        elapsed = time.perf_counter() - start
    return summarize(results, elapsed)


async def _closed_loop(session: aiohttp.ClientSession, spec: LoadSpec, payload: bytes,
                       deadline: float, results: list[RequestResult]) -> None:
    budget = [spec.max_requests]

    async def client() -> None:
        while time.perf_counter() < deadline and budget[0] > 0:
            budget[0] -= 1
            results.append(await send_one(session, spec.url, payload, spec.stream))

    await asyncio.gather(*(client() for _ in range(max(1, spec.concurrency))))


async def _open_loop(session: aiohttp.ClientSession, spec: LoadSpec, payload: bytes,
                     deadline: float, results: list[RequestResult]) -> None:
    rng = random.Random(spec.seed)
    inflight: set[asyncio.Task[None]] = set()
    gate = asyncio.Semaphore(_MAX_OPEN_INFLIGHT)

    async def one() -> None:
        async with gate:
            results.append(await send_one(session, spec.url, payload, spec.stream))

    next_at, sent = time.perf_counter(), 0
    while next_at < deadline and sent < spec.max_requests:
        delay = next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one())
        inflight.add(task)
        task.add_done_callback(inflight.discard)
        sent += 1
        next_at += rng.expovariate(spec.rate)
    if inflight:
        await asyncio.gather(*inflight)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.loadgen SPEC.json", file=sys.stderr)
        return 2
    spec = LoadSpec.from_json(orjson.loads(Path(args[0]).read_bytes()))
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    result = asyncio.run(run_load(spec))
    sys.stdout.write(orjson.dumps(result.to_json()).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
