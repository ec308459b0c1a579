"""The director's own bookkeeping of a dispatched request, over real sockets against an
emulated worker: the decode tokens it counts in flight are the ones the worker will serve."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.router.gateway_support import MODEL, RouterFactory, subset
from workers.fleet import FleetConfig

pytestmark = pytest.mark.integration


async def test_in_flight_tokens_count_max_tokens_as_the_window_clamps_them(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["slow"]))     # window 8,192 tokens
    body = {"model": MODEL, "prompt": "Tell me a long story.", "max_tokens": 10_000_000,
            "stream": True}
    async with aiohttp.ClientSession() as session:
        resp = await session.post(router.url + "/v1/completions", json=body)
        assert resp.status == 200
        await resp.content.readuntil(b"\n\n")            # streaming: prefill done, decoding
        deadline = time.monotonic() + 5.0
        while True:
            async with session.get(router.url + "/debug/fleet") as fleet_resp:
                [worker] = (await fleet_resp.json())["data"]
            if worker["inflight_requests"] == 1:
                break
            assert time.monotonic() < deadline, "the request never showed as in flight"
            await asyncio.sleep(0.05)
        resp.close()
    assert 0 < worker["inflight_tokens"] <= 8_192
