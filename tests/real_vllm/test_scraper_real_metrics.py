"""kvroute's scraper on a real engine's ``/metrics``: running, waiting, KV usage, and block
size and count from ``cache_config_info``, checked against the exposition itself."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from router.keys import REGISTRY
from tests.real_vllm.conftest import GPU_BLOCKS, MODEL, RealFleet, RouterFactory
from tests.real_vllm.test_openai_client import PASS_THROUGH_ROUTING
from workers.scraper import parse_metrics


def gauge(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} missing")


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        return str(response.read().decode())


async def test_router_snapshot_has_the_engines_cache_config(real_fleet: RealFleet,
                                                            make_router: RouterFactory) -> None:
    router = await make_router(PASS_THROUGH_ROUTING)
    registry = router.app[REGISTRY]
    for spec in real_fleet.fleet.workers:
        snapshot = registry.snapshot(spec.info.id)
        assert snapshot is not None and snapshot.healthy
        assert (snapshot.block_size, snapshot.num_gpu_blocks) == (128, GPU_BLOCKS)
        text = metrics_text(spec.info.url)
        assert 'block_size="128"' in text and f'num_gpu_blocks="{GPU_BLOCKS}"' in text
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:        # /v1/models is read on its own interval
        snapshot = registry.snapshot(real_fleet.fleet.workers[0].info.id)
        if snapshot is not None and snapshot.max_model_len:
            break
        await asyncio.sleep(0.5)
    assert snapshot is not None
    assert snapshot.max_model_len == 2048 and snapshot.served_models == (MODEL,)


async def test_running_waiting_and_kv_usage_under_load(real_fleet: RealFleet) -> None:
    """Five 1,484-token prompts on a 39-usable-block cache: three fit (12 blocks each), the
    others wait for capacity; each scrape must parse to what the exposition says."""
    url = real_fleet.urls[1]
    real_fleet.reset_prefix_caches()
    seen_running = seen_waiting = 0
    seen_usage = 0.0

    async def one(i: int, session: aiohttp.ClientSession) -> int:
        body = {"model": MODEL, "prompt": f"request {i} " + "the quick brown fox " * 370,
                "max_tokens": 48, "ignore_eos": True}
        async with session.post(url + "/v1/completions", json=body) as resp:
            await resp.read()
            return resp.status

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        tasks = [asyncio.create_task(one(i, session)) for i in range(5)]
        while not all(t.done() for t in tasks):
            text = await asyncio.to_thread(metrics_text, url)
            sample = parse_metrics(text)
            assert sample.running == gauge(text, "vllm:num_requests_running")
            assert sample.waiting == gauge(text, "vllm:num_requests_waiting")
            assert sample.kv_usage == gauge(text, "vllm:kv_cache_usage_perc")
            assert (sample.block_size, sample.num_gpu_blocks) == (128, GPU_BLOCKS)
            blocks_used = sample.kv_usage * (GPU_BLOCKS - 1)
            assert abs(blocks_used - round(blocks_used)) < 1e-6    # whole blocks of 39
            seen_running = max(seen_running, sample.running)
            seen_waiting = max(seen_waiting, sample.waiting)
            seen_usage = max(seen_usage, sample.kv_usage)
            await asyncio.sleep(0.2)
        assert [t.result() for t in tasks] == [200] * 5
    assert seen_running >= 2
    assert seen_waiting >= 1
    assert seen_usage >= 24 / 39             # at least two requests' blocks pinned at once
    idle = parse_metrics(metrics_text(url))
    assert (idle.running, idle.waiting, idle.kv_usage) == (0, 0, 0.0)
