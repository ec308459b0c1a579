"""The garbage collector's pauses, timed by generation into ``kvroute_gc_pause_seconds``."""

from __future__ import annotations

import gc

import pytest

from router.gc_pauses import GcPauses
from router.metrics import RouterMetrics
from tests.router.gateway_support import RouterFactory, subset
from workers.fleet import FleetConfig


def _count(metrics: RouterMetrics, generation: str) -> float:
    value = metrics.registry.get_sample_value("kvroute_gc_pause_seconds_count",
                                              {"generation": generation})
    return 0.0 if value is None else value


def test_each_collection_is_timed_under_its_generation_until_removed() -> None:
    metrics = RouterMetrics()
    pauses = GcPauses(metrics.gc_pause)
    assert [_count(metrics, g) for g in "012"] == [0.0, 0.0, 0.0]    # the series exist
    pauses.install()
    pauses.install()                 # once only
    try:
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
    finally:
        pauses.remove()
    assert _count(metrics, "2") == 2.0
    assert _count(metrics, "0") >= 1.0
    seconds = metrics.registry.get_sample_value("kvroute_gc_pause_seconds_sum",
                                                {"generation": "2"})
    assert seconds is not None and 0.0 < seconds < 10.0
    assert metrics.registry.get_sample_value(
        "kvroute_gc_pause_seconds_bucket", {"generation": "2", "le": "+Inf"}) == 2.0
    gc.collect(2)                    # removed: no longer counted
    assert _count(metrics, "2") == 2.0


@pytest.mark.integration
async def test_the_running_router_times_collections_and_shows_them_in_metrics(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    import aiohttp

    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    before = router.metric("kvroute_gc_pause_seconds_count", generation="2")
    gc.collect()                     # the router runs in this process
    assert router.metric("kvroute_gc_pause_seconds_count", generation="2") == before + 1
    async with aiohttp.ClientSession() as session, \
            session.get(router.url + "/metrics") as resp:
        text = await resp.text()
    assert 'kvroute_gc_pause_seconds_count{generation="2"}' in text
