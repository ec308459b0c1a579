"""How late the event loop runs, into ``kvroute_event_loop_lag_seconds``."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from router.loop_lag import LoopLag
from router.metrics import RouterMetrics
from tests.router.gateway_support import RouterFactory, subset
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
        await asyncio.sleep(0.1)              # fluent: woken on time
        fluent = _sample(metrics, "_count")
        assert fluent >= 2 and _sample(metrics, "_bucket", le="0.05") == fluent
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
