"""router/cors.py: a browser's preflight and the allowing headers, as vLLM's server answers
them (any origin by default), on plain answers, streams and refusals; a list of origins; off."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from tests.router.gateway_support import (
    MODEL,
    RouterFactory,
    scripted_router,
    subset,
)
from workers.fleet import FleetConfig

pytestmark = pytest.mark.integration
PAGE = "https://chat.example.com"
PREFLIGHT = {"Origin": PAGE, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type"}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


async def test_any_origin_by_default_on_answers_streams_and_refusals(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), api_keys=("k1",))
    async with aiohttp.ClientSession() as session:
        # the preflight carries no key: answered before the key is asked
        async with session.options(router.url + "/v1/chat/completions",
                                   headers=PREFLIGHT) as resp:
            assert resp.status == 200
            assert resp.headers["Access-Control-Allow-Origin"] == "*"
            assert "POST" in resp.headers["Access-Control-Allow-Methods"]
            assert resp.headers["Access-Control-Allow-Headers"] == "authorization, content-type"
        auth = {"Origin": PAGE, "Authorization": "Bearer k1"}
        async with session.post(router.url + "/v1/chat/completions", json=CHAT,
                                headers=auth) as resp:
            assert resp.status == 200
            assert resp.headers["Access-Control-Allow-Origin"] == "*"
            exposed = resp.headers["Access-Control-Expose-Headers"]
            assert "x-kvroute-worker" in exposed and "x-request-id" in exposed
            # what is left of a budget, which a page may read to slow down
            assert {"x-ratelimit-remaining-tokens", "x-ratelimit-reset-requests",
                    "retry-after", "x-kvroute-rule"} <= set(exposed.split(", "))
        async with session.post(router.url + "/v1/chat/completions",
                                json={**CHAT, "stream": True}, headers=auth) as resp:
            assert resp.status == 200
            assert resp.headers["Access-Control-Allow-Origin"] == "*"
            assert (await resp.read()).rstrip().endswith(b"data: [DONE]")
        async with session.post(router.url + "/v1/chat/completions", json=CHAT,
                                headers={"Origin": PAGE}) as resp:      # no key: 401
            assert resp.status == 401
            assert resp.headers["Access-Control-Allow-Origin"] == "*"   # the page can read why
        async with session.post(router.url + "/v1/chat/completions", json=CHAT,
                                headers={"Authorization": "Bearer k1"}) as resp:
            assert "Access-Control-Allow-Origin" not in resp.headers    # not a browser's call


async def test_only_the_listed_origins(emulated_fleet: FleetConfig,
                                       make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["h100-fast"]),
                               allowed_origins=(PAGE,))
    async with aiohttp.ClientSession() as session:
        async with session.options(router.url + "/v1/chat/completions",
                                   headers=PREFLIGHT) as resp:
            assert resp.status == 200
            assert resp.headers["Access-Control-Allow-Origin"] == PAGE
            assert resp.headers["Vary"] == "Origin"
        async with session.options(router.url + "/v1/chat/completions",
                                   headers={**PREFLIGHT, "Origin": "https://evil.example"}
                                   ) as resp:
            assert resp.status == 400
            assert "Access-Control-Allow-Origin" not in resp.headers
        async with session.post(router.url + "/v1/chat/completions", json=CHAT,
                                headers={"Origin": "https://evil.example"}) as resp:
            assert resp.status == 200
            assert "Access-Control-Allow-Origin" not in resp.headers


async def test_no_origins_no_cross_origin_answers(emulated_fleet: FleetConfig,
                                                  make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), allowed_origins=())
    async with aiohttp.ClientSession() as session:
        async with session.options(router.url + "/v1/chat/completions",
                                   headers=PREFLIGHT) as resp:
            assert resp.status == 405
            assert "Access-Control-Allow-Origin" not in resp.headers
        async with session.post(router.url + "/v1/chat/completions", json=CHAT,
                                headers={"Origin": PAGE}) as resp:
            assert resp.status == 200
            assert "Access-Control-Allow-Origin" not in resp.headers


async def _allowing_worker(request: web.Request) -> web.Response:
    """A worker as vLLM answers a request with ``Origin``: any origin allowed."""
    await request.read()
    return web.json_response({"id": "c", "object": "chat.completion", "choices": []}, headers={
        "Access-Control-Allow-Origin": "*", "Access-Control-Allow-Credentials": "true",
        "Vary": "Origin", "x-origin-seen": request.headers.get("Origin", "none")})


@pytest.mark.parametrize("origins", [(PAGE,), ()], ids=["one page", "none"])
async def test_a_workers_own_cors_fields_never_reach_the_client(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        origins: tuple[str, ...]) -> None:
    """The worker's ``Access-Control-Allow-Origin: *`` was relayed: any page could read the
    answers of a router whose ``--allowed-origins`` names one page, or none."""
    async with scripted_router(
            emulated_fleet, make_router, _allowing_worker, allowed_origins=origins) as router, \
            aiohttp.ClientSession() as session:
        for origin in (PAGE, "https://evil.example"):
            async with session.post(router.url + "/v1/chat/completions", json=CHAT,
                                    headers={"Origin": origin}) as resp:
                assert resp.status == 200
                allowed = resp.headers.getall("Access-Control-Allow-Origin", [])
                assert allowed == ([PAGE] if origin in origins else [])
                assert "Access-Control-Allow-Credentials" not in resp.headers
                assert resp.headers["x-origin-seen"] == "none"   # not the worker's call

