"""router/forwarded_headers.py: the client's fields a worker gets, unit and through a live
router to a worker that records what it was sent."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDict

from router.forwarded_headers import forwarded_headers
from tests.router.gateway_support import (
    MODEL,
    RouterFactory,
    scripted_router,
)
from workers.fleet import FleetConfig

pytestmark = pytest.mark.integration


def test_end_to_end_fields_go_on_and_the_hops_and_the_routers_own_do_not() -> None:
    client = CIMultiDict([
        ("User-Agent", "OpenAI/Python 1.0"), ("X-data-parallel-rank", "1"),
        ("X-Custom", "a"), ("x-custom", "b"), ("Connection", "keep-alive, X-Hop"),
        ("X-Hop", "1"), ("Keep-Alive", "timeout=5"), ("Host", "router"),
        ("Content-Length", "10"), ("Content-Type", "text/plain"), ("Accept-Encoding", "gzip"),
        ("Authorization", "Bearer k"), ("x-api-key", "k"), ("Cookie", "s=1"),
        ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ("X-Request-Id", "client-1"), ("X-Correlation", "c-1"), ("x-tenant", "acme"),
        ("Proxy-Foo", "p"), ("Expect", "100-continue"), ("Connection", "X-Second-Hop"),
        ("X-Second-Hop", "2"), ("Origin", "https://page.example"),
        ("Access-Control-Request-Method", "POST"), ("X-Forwarded-For", "6.6.6.6"),
        ("Forwarded", "for=6.6.6.6"), ("X-Real-IP", "6.6.6.6")])
    assert forwarded_headers(client, "X-Correlation") == {
        "User-Agent": "OpenAI/Python 1.0", "X-data-parallel-rank": "1", "X-Custom": "a, b"}


async def test_a_worker_gets_the_clients_own_fields(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """Only the content type, the request id, the trace context and the credentials went
    on: vLLM's ``X-data-parallel-rank`` and every field a sidecar reads were dropped."""
    received: list[CIMultiDict[str]] = []

    async def record(request: web.Request) -> web.Response:
        received.append(CIMultiDict(request.headers))
        await request.read()
        return web.json_response({"tokens": [1], "count": 1, "max_model_len": 8192})

    async with scripted_router(emulated_fleet, make_router, record) as router, \
            aiohttp.ClientSession() as session:
        for path, body in (("/v1/chat/completions", {
                "model": MODEL, "max_tokens": 2,
                "messages": [{"role": "user", "content": "hi"}]}),
                ("/tokenize", {"model": MODEL, "prompt": "hi"})):
            async with session.post(router.url + path, json=body, headers={
                    "X-data-parallel-rank": "1", "x-sidecar": "s", "Cookie": "c=1",
                    "Accept-Encoding": "gzip", "x-request-id": "mine"}) as resp:
                await resp.read()
    assert len(received) == 2
    for headers in received:
        assert headers["X-data-parallel-rank"] == "1" and headers["x-sidecar"] == "s"
        assert "Cookie" not in headers and "gzip" not in headers.get("Accept-Encoding", "")
        assert headers.getall("x-request-id") == ["mine"]
        assert headers["Content-Type"] == "application/json"

