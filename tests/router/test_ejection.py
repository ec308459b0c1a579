"""``router.ejection``: the failure count and cooldowns (a clock given by the test), then a live
router over emulated workers: a worker answering every request with a 500 while its
``/metrics`` scrapes fine is set aside, tried again after its cooldown, and still tried when
it is the only worker left (fail open)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable

import aiohttp
import openai
import orjson
import pytest
from aiohttp import web

from router.ejection import WorkerEjection
from router.keys import METRICS, REGISTRY, SCRAPER
from router.stalls import StallWatch
from tests.router.gateway_support import (
    MODEL,
    ROUTING_ROUND_ROBIN,
    FrontedWorker,
    RouterFactory,
    RouterHandle,
    fleet_entry,
    scripted_router,
    short_chat,
    subset,
    url_fleet,
)
from workers.fleet import FleetConfig


def test_consecutive_failures_eject_for_a_cooldown_that_doubles_up_to_its_cap() -> None:
    told: list[tuple[str, float]] = []
    ejection = WorkerEjection(3, 10.0, max_cooldown_s=25.0,
                              on_eject=lambda w, s: told.append((w, s)))
    for now in (0.0, 1.0):
        ejection.failed("w", now)
    assert ejection.ejected(1.0) == frozenset() and ejection.ejected_for("w", 1.0) == 0.0
    ejection.failed("w", 2.0)
    assert ejection.ejected(2.0) == {"w"} and ejection.ejected_for("w", 5.0) == 7.0
    ejection.failed("w", 3.0)                 # a fail-open request while out: no extension
    assert ejection.ejected_for("w", 3.0) == 9.0
    assert ejection.ejected(12.0) == frozenset()
    ejection.failed("w", 13.0)                # back, and failing at once: twice as long
    assert ejection.ejected_for("w", 13.0) == 20.0
    ejection.failed("w", 40.0)                # and again: capped
    assert ejection.ejected_for("w", 40.0) == 25.0
    assert told == [("w", 10.0), ("w", 20.0), ("w", 25.0)]


def test_a_forgotten_worker_keeps_neither_failures_nor_stalls() -> None:
    ejection = WorkerEjection(2, 10.0, stalls=StallWatch(1.0, 50.0))
    ejection.failed("w", 0.0)
    ejection.failed("w", 1.0)
    ejection.stalls.waiting("w", 0.0, None)
    assert ejection.ejected(2.0) == {"w"}
    ejection.forget("w")
    assert ejection.ejected(2.0) == frozenset() and ejection.ejected_for("w", 2.0) == 0.0
    ejection.failed("w", 3.0)                     # its count starts again from none
    assert ejection.ejected(3.0) == frozenset()


def test_a_restarted_engine_is_no_longer_set_aside_but_a_crash_loop_still_doubles() -> None:
    """The failures before an engine restart were the former engine's: the new one is not
    set aside for them. Forgotten outright, an engine crashing again and again was set aside
    for the base cooldown each time; its last cooldown is kept, so the next doubles. Its
    stall watch stays (requests sent to the new engine may be watched)."""
    ejection = WorkerEjection(2, 10.0, stalls=StallWatch(1.0, 50.0))
    ejection.failed("w", 0.0)
    ejection.failed("w", 1.0)
    ejection.stalls.waiting("w", 2.0, None)
    ejection.engine_restarted("w")
    assert ejection.ejected_for("w", 3.0) == 0.0
    assert ejection.ejected(3.5) == {"w"}           # stalled: still watched
    ejection.failed("w", 4.0)                       # one failure: the count began again
    assert ejection.ejected_for("w", 4.0) == 0.0
    ejection.failed("w", 5.0)
    assert ejection.ejected_for("w", 5.0) == 20.0   # the crash loop doubles


def test_an_answer_closes_the_count_and_the_doubling() -> None:
    ejection = WorkerEjection(2, 10.0)
    ejection.failed("w", 0.0)
    ejection.answered("w", 0.5)
    ejection.failed("w", 1.0)
    assert ejection.ejected(1.0) == frozenset()      # not two in a row
    ejection.failed("w", 2.0)
    assert ejection.ejected_for("w", 2.0) == 10.0
    ejection.answered("w", 2.5)                       # a fail-open request got through
    assert ejection.ejected(3.0) == frozenset()
    ejection.failed("w", 4.0)
    ejection.failed("w", 5.0)
    assert ejection.ejected_for("w", 5.0) == 10.0    # the base cooldown again
    ejection.failed("other", 5.0)
    assert ejection.ejected(5.0) == {"w"}


def test_an_answer_to_a_request_sent_before_the_failures_changes_nothing() -> None:
    """A 9 s stream sent before the worker broke ended well after its ejection and took it
    back, while it answered every new request with a 500."""
    ejection = WorkerEjection(2, 10.0)
    ejection.failed("w", 5.0)
    ejection.failed("w", 5.5)
    assert ejection.ejected_for("w", 5.5) == 10.0
    ejection.answered("w", 4.4)                       # sent at 4.4, before the failures
    assert ejection.ejected_for("w", 13.5) == 2.0     # still out
    ejection.failed("w", 16.0)                        # back, failing at once: twice as long
    assert ejection.ejected_for("w", 16.0) == 20.0
    ejection.failed("w", 17.0)
    ejection.answered("w", 16.5)                      # sent between two failures: too old
    assert ejection.ejected_for("w", 17.0) == 19.0
    ejection.answered("w", 17.5)                      # sent after the latest: it serves
    assert ejection.ejected(18.0) == frozenset()


def test_zero_never_ejects() -> None:
    ejection = WorkerEjection(0, 10.0)
    for now in range(100):
        ejection.failed("w", float(now))
    assert not ejection.enabled and ejection.ejected(50.0) == frozenset()


async def _first_attempts_on(router: RouterHandle, worker: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(
            f"{router.url}/debug/decisions") as resp:
        data = (await resp.json())["data"]
    return sum(1 for d in data if d["worker"] == worker and d["attempt"] == 0)


def _set_aside(router: RouterHandle, worker: str) -> dict[str, float | None]:
    """``kvroute_worker_set_aside`` of ``worker``, by reason."""
    registry = router.app[METRICS].registry
    return {reason: registry.get_sample_value("kvroute_worker_set_aside", {
        "worker": worker, "gpu": router.app[REGISTRY].info(worker).gpu.name,
        "model": MODEL, "reason": reason}) for reason in ("ejected", "stalled")}


async def _ejected_for(router: RouterHandle, worker: str) -> float:
    return float((await fleet_entry(router, worker))["ejected_for_s"])


# long enough for 12 requests on a loaded machine (the counts assume it still set aside)
EJECT_FOR_S = 3.0


@pytest.mark.integration
async def test_a_worker_failing_every_request_is_set_aside_then_tried_again(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["failing", "h100-fast"]),
                               ROUTING_ROUND_ROBIN, eject_after=3, eject_for_s=EJECT_FOR_S)
    async with aiohttp.ClientSession() as session:
        answers = [await short_chat(session, router) for _ in range(12)]
        assert answers == [(200, "h100-fast")] * 12       # each failure retried elsewhere
        # round-robin alone would put half the first attempts on it; three eject it
        assert await _first_attempts_on(router, "failing") == 3
        assert router.metric("kvroute_worker_ejections_total", worker="failing") == 1
        assert 0.0 < await _ejected_for(router, "failing") <= EJECT_FOR_S
        assert await _ejected_for(router, "h100-fast") == 0.0
        # the state as a gauge while it lasts (kvroute_worker_up stays 1: it is healthy)
        assert _set_aside(router, "failing") == {"ejected": 1.0, "stalled": 0.0}
        assert _set_aside(router, "h100-fast") == {"ejected": 0.0, "stalled": 0.0}
        # every worker's count is exported from 0 (an alert reads its first increase), its
        # retries after a 5xx for each model it declares too (the client success ratio
        # subtracts them from the 5xx answers)
        registry = router.app[METRICS].registry
        assert registry.get_sample_value(
            "kvroute_worker_ejections_total", {"worker": "h100-fast"}) == 0.0
        for reason in ("connect", "disconnect", "http_5xx", "redirect"):
            assert registry.get_sample_value("kvroute_retries_total", {
                "worker": "h100-fast", "reason": reason, "model": MODEL}) == 0.0
        for _ in range(100):                                 # the cooldown ends
            if await _ejected_for(router, "failing") == 0.0:
                break
            await asyncio.sleep(0.1)
        assert _set_aside(router, "failing") == {"ejected": 0.0, "stalled": 0.0}
        answers = [await short_chat(session, router) for _ in range(4)]
        assert answers == [(200, "h100-fast")] * 4
    # tried once more on coming back, failed, and set aside again, for twice as long
    assert await _first_attempts_on(router, "failing") == 4
    assert router.metric("kvroute_worker_ejections_total", worker="failing") == 2
    assert EJECT_FOR_S < await _ejected_for(router, "failing") <= 2 * EJECT_FOR_S


@pytest.mark.integration
async def test_a_decision_names_the_workers_set_aside_or_tried(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """An ejected worker appeared in a decision's ``filtered_out`` as unhealthy (while
    ``/debug/fleet`` said healthy), a worker a retry had tried already vanished from it, and
    a decision made with every worker set aside said nothing of it."""
    router = await make_router(subset(emulated_fleet, ["failing", "h100-fast"]),
                               ROUTING_ROUND_ROBIN, eject_after=1, eject_for_s=60.0)
    async with aiohttp.ClientSession() as session:
        answers = [await short_chat(session, router) for _ in range(3)]
        async with session.get(f"{router.url}/debug/decisions") as resp:
            decisions = (await resp.json())["data"]
    assert answers == [(200, "h100-fast")] * 3
    retry = next(d for d in decisions if d["attempt"] == 1)
    assert retry["filtered_out"].get("failing") == "tried"
    first = next(d for d in decisions
                 if d["request_id"] == retry["request_id"] and d["attempt"] == 0)
    assert (first["outcome"]["status"], retry["outcome"]["status"]) == (500, 200)
    later = [d for d in decisions if d["attempt"] == 0 and d["worker"] == "h100-fast"]
    assert later and all(d["filtered_out"].get("failing") == "ejected" for d in later)
    alone = await make_router(subset(emulated_fleet, ["failing"]), ROUTING_ROUND_ROBIN,
                              eject_after=1, eject_for_s=60.0, max_retries=0)
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            await short_chat(session, alone)
        async with session.get(f"{alone.url}/debug/decisions") as resp:
            opened = (await resp.json())["data"]
    assert [d["attributes"].get("fail_open") for d in opened] == [True, None]   # (newest first)


@pytest.mark.integration
async def test_a_worker_ending_its_streams_with_error_events_is_set_aside(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    """vLLM tells of an engine failing a request after its stream began in an error event:
    the router counted each as an answer (200), so a worker failing every stream that way
    was never set aside. Each counts as the worker's failure (its 500) now."""
    caplog.set_level(logging.INFO, logger="router.director")
    router = await make_router(subset(emulated_fleet, ["erring", "h100-fast"]),
                               ROUTING_ROUND_ROBIN, eject_after=3, eject_for_s=60.0)
    client = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)
    outcomes: list[str] = []
    for _ in range(10):
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8,
            stream=True)
        try:
            texts = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices]
            outcomes.append(f"whole {len(texts)}")
        except openai.APIError as error:
            assert "EngineCore" in error.message or "fault injection" in error.message
            outcomes.append("error")
    await client.close()
    # every other request until its third error, none after
    assert outcomes.count("error") == 3 and outcomes[-4:] == ["whole 9"] * 4
    assert router.metric("kvroute_worker_ejections_total", worker="erring") == 1
    assert router.metric("kvroute_requests_total", worker="erring", status="500") == 3
    assert router.metric("kvroute_requests_total", worker="erring", status="200") == 0
    assert router.metric("kvroute_requests_total", worker="h100-fast", status="200") == 7
    assert sum("erring ended its stream with an error event of its own" in r.getMessage()
               for r in caplog.records) == 3        # (not as a stream it broke)


@pytest.mark.integration
async def test_an_ejected_worker_is_still_tried_when_no_other_can_serve(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["failing"]), ROUTING_ROUND_ROBIN,
                               eject_after=1, eject_for_s=60.0, max_retries=0)
    async with aiohttp.ClientSession() as session:
        statuses = [(await short_chat(session, router))[0] for _ in range(3)]
    # the worker's 500 each time, retried nowhere (502): never 503 "no worker available"
    assert statuses == [502] * 3
    assert router.metric("kvroute_worker_ejections_total", worker="failing") == 1
    assert await _first_attempts_on(router, "failing") == 3
    # one decision recorded per request (the one that found no candidate is not)
    async with aiohttp.ClientSession() as session, session.get(
            f"{router.url}/debug/decisions") as resp:
        assert [d["worker"] for d in (await resp.json())["data"]] == ["failing"] * 3


async def test_the_routers_own_open_file_limit_ejects_no_worker(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of file descriptors, the router blamed the workers: every request was retried on
    each, all counted as failing, and every worker was ejected within 60 ms. Now it is the
    router's 503, not retried, and no worker is set aside."""
    from router.keys import DIRECTOR
    from workers.upstream import UpstreamLocalError

    router = await make_router(subset(emulated_fleet, ["h100-fast", "a100-fast"]),
                               ROUTING_ROUND_ROBIN)
    client = router.app[DIRECTOR]._proxy._client

    async def no_descriptors(*args: object, **kwargs: object) -> None:
        raise UpstreamLocalError("cannot connect to 127.0.0.1:1: Too many open files")

    monkeypatch.setattr(client, "_pooled", lambda *args: None)
    monkeypatch.setattr(client, "_connect", no_descriptors)
    scraper = router.app[SCRAPER]
    monkeypatch.setattr(scraper._client, "_pooled", lambda *args: None)
    monkeypatch.setattr(scraper._client, "_connect", no_descriptors)
    for _ in range(6):          # past the fail threshold: the workers were marked down
        await scraper.scrape_once()
    async with aiohttp.ClientSession() as session:
        for _ in range(12):
            async with session.post(f"{router.url}/v1/chat/completions", json={
                    "model": MODEL, "max_tokens": 2,
                    "messages": [{"role": "user", "content": "hi"}]}) as resp:
                assert resp.status == 503 and resp.headers["Retry-After"] == "1"
                assert "open-file limit" in (await resp.json())["error"]["message"]
    for worker in ("h100-fast", "a100-fast"):
        entry = await fleet_entry(router, worker)
        assert entry["ejected_for_s"] == 0 and entry["healthy"]
        assert router.metric("kvroute_worker_ejections_total", worker=worker) == 0
        assert router.metric("kvroute_requests_total", worker=worker) == 0   # not its 503s
    assert router.metric("kvroute_retries_total") == 0
    assert router.metric("kvroute_requests_total", worker="", status="503") == 12


async def _stream_read_by_no_one(url: str, body: bytes) -> asyncio.StreamWriter:
    """A streaming request sent to ``url`` (a router's completions) by a client that reads
    nothing of its answer (a receive window of 4 kB); close the writer returned to leave."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    host, port = url.removeprefix("http://").split(":")
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    _, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    return writer


@pytest.mark.integration
@pytest.mark.integration
@pytest.mark.parametrize("then", ["done-later", "silent"])
async def test_a_client_leaving_at_the_workers_error_event_counts_it_as_the_workers_failure(
        emulated_fleet: FleetConfig, make_router: RouterFactory, then: str) -> None:
    """The SDKs raise on a stream's error event and close the stream: the router saw its
    client leave before the rest (vLLM's ``[DONE]``) and counted a client gone (499), not the
    worker's failure, so a worker failing every stream so was set aside only when its
    clients were slower than the router's last write (a flaky count under load)."""
    chunk = b"data: " + orjson.dumps({
        "id": "c", "object": "chat.completion.chunk", "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]})
    error = b"data: " + orjson.dumps({"error": {
        "message": "EngineCore encountered an issue.", "type": "InternalServerError",
        "param": None, "code": 500}})

    async def erring(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):
            await response.write(chunk + b"\n\n" + error + b"\n\n")
            await asyncio.sleep(0.5 if then == "done-later" else 3.0)
            await response.write(b"data: [DONE]\n\n")
        return response

    async with scripted_router(emulated_fleet, make_router, erring, eject_after=1,
                               eject_for_s=60.0, max_retries=0) as router, \
            aiohttp.ClientSession() as session:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                "stream": True}
        async with session.post(router.url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            seen = b""
            while b"EngineCore" not in seen:         # as an SDK reads: up to the error
                seen += await asyncio.wait_for(resp.content.readany(), 10.0)
        # (left: the response closed at the block's end)
        deadline = asyncio.get_running_loop().time() + 10.0
        while not router.metric("kvroute_requests_total", worker="w"):
            assert asyncio.get_running_loop().time() < deadline, "never counted"
            await asyncio.sleep(0.02)
        assert router.metric("kvroute_requests_total", worker="w", status="500") == 1
        assert router.metric("kvroute_requests_total", worker="w", status="499") == 0
        assert router.metric("kvroute_worker_ejections_total", worker="w") == 1


@pytest.mark.parametrize("leaving", ["stops-reading", "disconnects"])
async def test_a_client_leaving_between_failures_does_not_clear_the_workers_count(
        emulated_fleet: FleetConfig, make_router: RouterFactory, leaving: str) -> None:
    """A stream whose client left (one that stopped reading, cut at the send timeout)
    counted as the worker's answer: impatient clients cleared the failures of a worker
    failing every other request, and it was never set aside."""
    event = b"data: " + orjson.dumps({
        "id": "c", "object": "text_completion", "model": MODEL,
        "choices": [{"index": 0, "text": "x" * 65_536, "finish_reason": None}]}) + b"\n\n"

    async def failing_but_streaming(request: web.Request) -> web.StreamResponse:
        if not orjson.loads(await request.read()).get("stream"):
            return web.json_response({"object": "error", "type": "InternalServerError",
                                      "message": "EngineCore failed", "code": 500},
                                     status=500)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):     # until the router closes it
            for _ in range(2000):
                await response.write(event)
        return response

    async with scripted_router(emulated_fleet, make_router, failing_but_streaming,
                               eject_after=3, eject_for_s=60.0, max_retries=0,
                               send_timeout_s=0.3) as router, \
            aiohttp.ClientSession() as session:
        url = router.url + "/v1/completions"
        body = {"model": MODEL, "prompt": "Tell me a story", "max_tokens": 500}
        for _ in range(2):
            async with session.post(url, json=body) as resp:
                assert resp.status == 502
        streamed = {**body, "stream": True}
        unread: asyncio.StreamWriter | None = None
        if leaving == "stops-reading":
            unread = await _stream_read_by_no_one(router.url, orjson.dumps(streamed))
        else:
            resp = await session.post(url, json=streamed)
            assert resp.status == 200
            assert (await resp.content.readexactly(6)) == b"data: "     # it streams
            resp.close()
        try:
            deadline = asyncio.get_running_loop().time() + 10.0
            while not router.metric("kvroute_requests_total", worker="w", status="499"):
                assert asyncio.get_running_loop().time() < deadline, "never cut"
                await asyncio.sleep(0.02)
        finally:
            if unread is not None:
                unread.close()
        assert await _ejected_for(router, "w") == 0.0
        async with session.post(url, json=body) as resp:
            assert resp.status == 502
        assert await _ejected_for(router, "w") > 0.0           # the third failure in a row
        assert router.metric("kvroute_worker_ejections_total", worker="w") == 1


@pytest.mark.integration
async def test_a_request_every_engine_fails_sets_no_worker_aside(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    """A body vLLM fails on with its 500 (a JSON schema past what its engine reads) failed on
    every worker it was retried on, and each attempt counted toward setting that worker
    aside: a client sending it a few times set healthy workers aside one after another. A
    request every worker tried fails so is taken for the cause; a worker whose engine fails
    requests that another serves is still set aside."""
    caplog.set_level(logging.INFO, logger="router.director")
    backend = subset(emulated_fleet, ["h100-fast"]).workers[0].info.url
    engine_error = {"error": {"message": "", "type": "InternalServerError", "param": None,
                              "code": 500}}
    sick: set[str] = set()      # the workers whose engine fails every request

    def engine(name: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def answer(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            if name in sick or b"poison" in body:
                return web.json_response(engine_error, status=500)
            async with aiohttp.ClientSession() as session, session.post(
                    backend + request.path_qs, data=body,
                    headers={"Content-Type": "application/json"}) as served:
                return web.Response(body=await served.read(), status=served.status,
                                    content_type=served.content_type)
        return answer

    async with FrontedWorker(backend, engine("well")) as well, \
            FrontedWorker(backend, engine("sick")) as ill, aiohttp.ClientSession() as session:
        router = await make_router(url_fleet({"well": well.url, "sick": ill.url}),
                                   ROUTING_ROUND_ROBIN, eject_after=2, eject_for_s=60.0)
        poison = {"model": MODEL, "max_tokens": 4,
                  "messages": [{"role": "user", "content": "poison"}]}
        for _ in range(4):      # each tried on both workers, failed by both engines
            async with session.post(f"{router.url}/v1/chat/completions", json=poison) as resp:
                assert resp.status == 502
        for worker in ("well", "sick"):
            assert router.metric("kvroute_worker_ejections_total", worker=worker) == 0
            assert await _ejected_for(router, worker) == 0.0
        assert sum("answered it with an error of its engine: taken for the request's doing"
                   in r.getMessage() for r in caplog.records) == 4
        sick.add("sick")        # an engine failing what the other serves: set aside
        answers = [await short_chat(session, router) for _ in range(6)]
        assert answers == [(200, "well")] * 6
        assert router.metric("kvroute_worker_ejections_total", worker="sick") == 1
        assert router.metric("kvroute_worker_ejections_total", worker="well") == 0
