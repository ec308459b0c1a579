"""How late the event loop runs, into ``kvroute_event_loop_lag_seconds``."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from router.loop_lag import LoopLag, LoopStalls
from router.metrics import RouterMetrics
from tests.router.gateway_support import MODEL, RouterFactory, subset
from workers.fleet import FleetConfig


def _sample(metrics: RouterMetrics, suffix: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(f"kvroute_event_loop_lag_seconds{suffix}",
                                              labels)
    return 0.0 if value is None else value


async def test_a_callback_holding_the_loop_is_seen_as_that_much_lag() -> None:
    metrics = RouterMetrics()
    lag = LoopLag(metrics.loop_lag, interval_s=0.02)
    lag.start()
    try:
        await asyncio.sleep(0.1)              # fluent: woken on time (a loaded machine's
        fluent = _sample(metrics, "_count")   # hiccups well under the hold below)
        assert fluent >= 1 and _sample(metrics, "_bucket", le="0.25") == fluent
        time.sleep(0.3)                       # a callback that holds the loop 300 ms
        await asyncio.sleep(0.05)
    finally:
        await lag.stop()
    assert _sample(metrics, "_bucket", le="0.25") < _sample(metrics, "_count")
    assert 0.25 <= _sample(metrics, "_sum") < 5.0
    count = _sample(metrics, "_count")
    await asyncio.sleep(0.05)                 # stopped: nothing more recorded
    assert _sample(metrics, "_count") == count


@pytest.mark.integration
async def test_the_running_router_exports_its_loop_lag(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    await asyncio.sleep(0.25)
    assert router.metric("kvroute_event_loop_lag_seconds_count") >= 1
    async with aiohttp.ClientSession() as session, \
            session.get(router.url + "/metrics") as resp:
        assert "kvroute_event_loop_lag_seconds_bucket" in await resp.text()


def test_a_stall_is_told_to_whoever_asks_since_when() -> None:
    now = [0.0]
    stalls = LoopStalls(clock=lambda: now[0], interval_s=0.1)
    assert not stalls.since(0.0)                 # not watched: never stalled
    now[0] = 1.0
    stalls.woke(0.01)                            # a fluent loop
    assert not stalls.since(0.5)
    now[0] = 3.0
    stalls.woke(1.9)                             # it woke 1.9 s late
    assert stalls.since(0.5) and stalls.since(3.0) and not stalls.since(3.1)
    now[0] = 3.5                                 # due at 3.1, not woken yet: still fluent
    assert not stalls.since(3.1)
    now[0] = 3.7                                 # past due by more than a stall: stalled
    assert stalls.since(3.1)
    stalls.unwatched()                           # (the watch stopped with the app)
    assert not stalls.since(3.1)


async def test_the_watch_tells_a_stall_and_not_the_lag_of_a_busy_loop() -> None:
    metrics = RouterMetrics()
    stalls = LoopStalls()
    lag = LoopLag(metrics.loop_lag, interval_s=0.02, stalls=stalls)
    lag.start()
    try:
        start = time.monotonic()
        await asyncio.sleep(0.05)
        time.sleep(0.1)                       # a busy loop's lag
        await asyncio.sleep(0.05)
        assert not stalls.since(start)
        time.sleep(0.6)                       # a stall
        assert stalls.since(start)            # (told before the watch has woken)
        await asyncio.sleep(0.05)
        assert stalls.since(start)
    finally:
        await lag.stop()


@pytest.mark.integration
async def test_times_measured_across_a_stall_of_the_router_are_not_learnt(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A router stopped for half a minute with streams in flight (its process stopped, its
    machine paused) learnt those streams' times as its workers' pace: the cheap worker's
    corrected time per token doubled, and requests went elsewhere. Measured across a stall,
    a request's times reach neither the estimators nor the workers' histograms."""
    router = await make_router(subset(emulated_fleet, ["slow"]))      # (tokens at an L40S's pace)
    body = {"model": MODEL, "max_tokens": 12, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session:
        for stall in (False, True):
            async with session.post(router.url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                await resp.content.readany()              # the first events
                if stall:
                    time.sleep(0.7)                       # the router's loop stalls
                await resp.read()
    assert router.metric("kvroute_client_ttft_seconds_count") == 2     # what clients waited
    assert router.metric("kvroute_ttft_seconds_count", worker="slow") == 1
    assert router.metric("kvroute_tpot_seconds_count", worker="slow") == 1
