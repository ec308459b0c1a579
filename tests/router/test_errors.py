"""The error middleware: every failure becomes an OpenAI error body with the right status."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from router.errors import (
    InvalidRequest,
    ModelNotFound,
    NoWorkerAvailable,
    RouterError,
    UpstreamError,
    UpstreamTimeout,
    error_middleware,
)

RAISED: dict[str, Exception] = {
    "invalid": InvalidRequest("bad field", param="messages"),
    "model": ModelNotFound("The model `x` does not exist.", param="model",
                           headers={"x-kvroute-worker": "none"}),
    "busy": NoWorkerAvailable("no worker"),
    "upstream": UpstreamError("all failed"),
    "timeout": UpstreamTimeout("too slow"),
    "crash": ZeroDivisionError("boom"),
}


async def _raise(request: web.Request) -> web.Response:
    raise RAISED[request.match_info["what"]]


@pytest.fixture
async def client() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    app = web.Application(middlewares=[error_middleware], client_max_size=10)
    app.router.add_get("/raise/{what}", _raise)
    app.router.add_get("/v1/messages/raise/{what}", _raise)

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())
    app.router.add_post("/echo", echo)
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        yield test_client


@pytest.mark.parametrize(("what", "status", "type_", "code", "param"), [
    ("invalid", 400, "invalid_request_error", "invalid_request", "messages"),
    ("model", 404, "NotFoundError", 404, "model"),          # vLLM's own body
    ("busy", 503, "service_unavailable", "no_worker_available", None),
    ("upstream", 502, "upstream_error", "upstream_error", None),
    ("timeout", 504, "timeout_error", "upstream_timeout", None),
    ("crash", 500, "internal_error", "internal_error", None),
])
async def test_errors_render_openai_bodies(client: TestClient[web.Request, web.Application],
                                           what: str, status: int, type_: str, code: str,
                                           param: str | None) -> None:
    resp = await client.get(f"/raise/{what}")
    assert resp.status == status
    body = await resp.json()
    assert body["error"]["type"] == type_
    assert body["error"]["code"] == code
    assert body["error"]["param"] == param
    expected = "Internal router error" if what == "crash" else str(RAISED[what].args[0])
    assert body["error"]["message"] == expected


@pytest.mark.parametrize(("what", "status", "type_"), [
    ("invalid", 400, "invalid_request_error"),
    ("model", 404, "NotFoundError"),          # vLLM's type, as its Messages API answers
    ("busy", 503, "overloaded_error"),
    ("upstream", 502, "api_error"),
    ("timeout", 504, "api_error"),
    ("crash", 500, "api_error"),
])
async def test_errors_on_the_messages_api_take_anthropics_shape(
        client: TestClient[web.Request, web.Application], what: str, status: int,
        type_: str) -> None:
    resp = await client.get(f"/v1/messages/raise/{what}")
    expected = "Internal router error" if what == "crash" else str(RAISED[what].args[0])
    assert (resp.status, await resp.json()) == (status, {
        "type": "error", "error": {"type": type_, "message": expected}})
    resp = await client.get("/v1/messages/nowhere")
    assert (resp.status, (await resp.json())["error"]["type"]) == (404, "not_found_error")


async def test_error_headers_are_kept(client: TestClient[web.Request, web.Application]) -> None:
    resp = await client.get("/raise/model")
    assert resp.headers["x-kvroute-worker"] == "none"
    assert "x-kvroute-profile" not in resp.headers      # the raiser's headers win


async def test_errors_before_routing_say_so(
        client: TestClient[web.Request, web.Application]) -> None:
    resp = await client.get("/raise/invalid")
    assert (resp.headers["x-kvroute-worker"], resp.headers["x-kvroute-profile"],
            resp.headers["x-kvroute-reason"]) == (
        "none", "none", "rejected before routing: invalid_request")


async def test_framework_errors_become_openai_errors(
        client: TestClient[web.Request, web.Application]) -> None:
    resp = await client.post("/echo", data=b"x" * 100)
    assert resp.status == 413
    assert (await resp.json())["error"]["code"] == "request_too_large"
    resp = await client.get("/nowhere")
    assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"
    resp = await client.get("/echo")
    assert resp.status == 405
    assert (await resp.json())["error"]["code"] == "method_not_allowed"
    assert resp.headers["Allow"] == "POST"          # as HTTP asks of a 405


def test_str_shows_status_and_message() -> None:
    assert str(UpstreamTimeout("too slow")) == "504: too slow"
    assert RouterError("x").status == 500
