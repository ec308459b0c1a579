"""W3C trace context through the router: a client's ``traceparent`` and ``tracestate`` reach
the worker on every hop (vLLM's spans join the client's trace), an invalid one goes nowhere,
and the trace id names the routing decision in ``/debug/decisions`` and the decision log.

The worker is an emulated one behind a tap, a loopback proxy in the test that records the
headers of each request it passes on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import MappingProxyType

import aiohttp
import orjson
import pytest
from aiohttp import web
from multidict import CIMultiDict

from policies.base import Decision, RoutingRequest
from router.decision_log import decision_line
from router.trace_context import request_trace_id, trace_headers, trace_id
from tests.router.gateway_support import MODEL, ROUTING_ROUND_ROBIN, RouterFactory, url_fleet
from workers.fleet import FleetConfig

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


@pytest.mark.parametrize(("value", "expected"), [
    (TRACEPARENT, TRACE),
    (f"  {TRACEPARENT}\t", TRACE),                             # optional white space
    (f"01-{TRACE}-00f067aa0ba902b7-01-later-fields", TRACE),   # a later version's fields
    (f"00-{TRACE}-00f067aa0ba902b7-01-more", None),            # version 00 has none
    (f"ff-{TRACE}-00f067aa0ba902b7-01", None),                 # version ff is invalid
    (f"00-{TRACE.upper()}-00f067aa0ba902b7-01", None),         # hex is lowercase
    (f"00-{'0' * 32}-00f067aa0ba902b7-01", None),              # no trace
    (f"00-{TRACE}-{'0' * 16}-01", None),                       # no parent
    (f"00-{TRACE[:-1]}-00f067aa0ba902b7-01", None),
    ("", None), (None, None), ("garbage", None),
])
def test_a_traceparent_is_read_as_w3c_trace_context_reads_it(
        value: str | None, expected: str | None) -> None:
    assert trace_id(value) == expected


def test_what_goes_on_to_the_worker() -> None:
    assert trace_headers({}) == {}
    assert trace_headers({"tracestate": "a=1"}) == {}                   # no parent: nothing
    assert trace_headers({"traceparent": "bad", "tracestate": "a=1"}) == {}
    assert trace_headers({"traceparent": TRACEPARENT}) == {"traceparent": TRACEPARENT}
    several = CIMultiDict([("traceparent", TRACEPARENT), ("tracestate", "a=1"),
                           ("Tracestate", "b=2, c=3")])
    assert trace_headers(several) == {"traceparent": TRACEPARENT,
                                      "tracestate": "a=1,b=2, c=3"}    # one list, in order
    too_many = ",".join(f"k{i}=v" for i in range(33))
    assert trace_headers({"traceparent": TRACEPARENT, "tracestate": too_many}) == {
        "traceparent": TRACEPARENT}                                    # discarded whole
    thirty_two = ",,".join(f"k{i}=v" for i in range(32))             # empty members too
    assert trace_headers({"traceparent": TRACEPARENT, "tracestate": thirty_two})[
        "tracestate"] == thirty_two
    twice = CIMultiDict([("traceparent", TRACEPARENT), ("traceparent", TRACEPARENT)])
    assert trace_headers(twice) == {}                 # not one trace: nothing goes on
    assert request_trace_id(several) == TRACE


def test_the_decision_log_line_names_the_trace() -> None:
    decision = Decision(request_id="r", worker_id="w", model=MODEL, profile="p", rule=None,
                        reason="x", attributes=MappingProxyType({}))
    traced = RoutingRequest(request_id="r", model=MODEL, headers={"traceparent": TRACEPARENT})
    untraced = RoutingRequest(request_id="r", model=MODEL)
    assert orjson.loads(decision_line(traced, decision, 0, 1e-4, 1.0))["trace_id"] == TRACE
    assert orjson.loads(decision_line(untraced, decision, 0, 1e-4, 1.0))["trace_id"] is None


class Tap:
    """A loopback proxy in front of one worker, remembering each request's headers."""

    def __init__(self, worker_url: str) -> None:
        self.worker_url = worker_url
        self.seen: list[tuple[str, CIMultiDict[str]]] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._relay)
        self._session = aiohttp.ClientSession()
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def headers_of(self, path: str) -> list[CIMultiDict[str]]:
        return [headers for seen_path, headers in self.seen if seen_path == path]

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.path, CIMultiDict(request.headers)))
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in ("host", "content-length", "transfer-encoding")}
        async with self._session.request(request.method, self.worker_url + request.path_qs,
                                         data=await request.read(), headers=headers) as answer:
            response = web.StreamResponse(status=answer.status, headers={
                k: v for k, v in answer.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding",
                                     "content-encoding", "connection")})
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response


@pytest.fixture
async def tapped(emulated_fleet: FleetConfig) -> AsyncIterator[tuple[Tap, FleetConfig]]:
    worker = next(w for w in emulated_fleet.workers if w.info.id == "h100-fast")
    tap = Tap(worker.info.url)
    url = await tap.start()
    fleet = url_fleet({"tapped": url})
    try:
        yield tap, fleet
    finally:
        await tap.stop()


@pytest.mark.integration
async def test_the_client_trace_reaches_the_worker_and_names_the_decision(
        tapped: tuple[Tap, FleetConfig], make_router: RouterFactory) -> None:
    tap, fleet = tapped
    router = await make_router(fleet, ROUTING_ROUND_ROBIN)
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    traced = {"traceparent": TRACEPARENT, "tracestate": "vendor=abc"}
    async with aiohttp.ClientSession() as http:
        for stream in (False, True):
            async with http.post(router.url + "/v1/chat/completions", headers=traced,
                                 json={**chat, "stream": stream}) as resp:
                assert resp.status == 200, await resp.text()
                await resp.read()
        async with http.post(router.url + "/tokenize", headers=traced,
                             json={"model": MODEL, "prompt": "Hi"}) as resp:
            assert resp.status == 200, await resp.text()
        # an invalid traceparent is passed on to no one, nor its tracestate
        async with http.post(router.url + "/v1/chat/completions", json=chat, headers={
                "traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01",
                "tracestate": "vendor=abc"}) as resp:
            assert resp.status == 200, await resp.text()
            await resp.read()
        async with http.get(router.url + "/debug/decisions") as resp:
            decisions = (await resp.json())["data"]
    chats = tap.headers_of("/v1/chat/completions")
    assert len(chats) == 3
    for headers in [*chats[:2], *tap.headers_of("/tokenize")]:
        assert headers.get("traceparent") == TRACEPARENT
        assert headers.get("tracestate") == "vendor=abc"
    assert "traceparent" not in chats[2] and "tracestate" not in chats[2]
    assert [d["trace_id"] for d in decisions] == [None, TRACE, TRACE]    # newest first
