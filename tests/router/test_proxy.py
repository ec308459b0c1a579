"""Faults between the router and its workers, over real sockets against emulated workers:
retries on 5xx and refused connections, upstream timeout, a stream that breaks, a client
that leaves, a fleet with no healthy worker, a worker whose /metrics is garbage."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import aiohttp
import openai
import orjson
import pytest
from aiohttp import web

from router.loop_lag import LoopStalls
from router.proxy import ProxyResult, RetryableUpstream, cut_at_worker
from tests.router.gateway_support import (
    MODEL,
    ROUTING_ROUND_ROBIN,
    FrontedWorker,
    RouterFactory,
    RouterHandle,
    fleet_entry,
    scripted_router,
    subset,
    url_fleet,
)
from workers.emulator.process import EmulatorProcess
from workers.fleet import FleetConfig
from workers.ports import free_port
from workers.scraper import parse_metrics

pytestmark = pytest.mark.integration
MESSAGES = [{"role": "user", "content": "Tell me a long story."}]


def client(router: RouterHandle) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)


async def decisions(router: RouterHandle) -> list[dict[str, object]]:
    async with aiohttp.ClientSession() as session, session.get(
            router.url + "/debug/decisions") as resp:
        data: list[dict[str, object]] = (await resp.json())["data"]
        return data


async def test_5xx_before_first_byte_is_retried_on_another_worker(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["failing", "h100-fast"]),
                               ROUTING_ROUND_ROBIN)
    for stream in (False, True, False, True):
        raw = await client(router).chat.completions.with_raw_response.create(
            model=MODEL, messages=MESSAGES, max_tokens=3, stream=stream)  # type: ignore[arg-type]
        assert raw.status_code == 200
        assert raw.headers["x-kvroute-worker"] == "h100-fast"
        if stream:
            assert [c async for c in raw.parse()]   # type: ignore[union-attr]
    first_on_failing = [d for d in await decisions(router)
                        if d["worker"] == "failing" and d["attempt"] == 0]
    assert len(first_on_failing) >= 1
    assert router.metric("kvroute_retries_total", worker="failing", model=MODEL,
                         reason="http_5xx") == len(first_on_failing)
    assert router.metric("kvroute_requests_total", model=MODEL, worker="failing",
                         gpu="A100-80GB", profile="default", status="500") == len(
        first_on_failing)


async def _fail(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response({"error": {"message": "boom"}}, status=500)


async def test_a_failure_with_no_other_worker_to_try_is_not_counted_as_a_retry(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """``kvroute_retries_total`` counts requests sent on to another worker: a fleet of one
    failing worker counted one "retry" per failed request, none of which was retried."""
    async with scripted_router(emulated_fleet, make_router, _fail, eject_after=0) as router, \
            aiohttp.ClientSession() as session:
        for path, body in (("/v1/chat/completions", {"model": MODEL, "max_tokens": 2,
                                                     "messages": MESSAGES}),
                           ("/tokenize", {"model": MODEL, "prompt": "hi"})):
            for _ in range(2):
                async with session.post(router.url + path, json=body) as resp:
                    assert resp.status == 502
    # every failed attempt at the worker, the utility requests' too (they were left out, so
    # the clients' success ratio, attempts less retries, could not read them)
    assert router.metric("kvroute_requests_total", worker="w", status="500", api="chat") == 2
    assert router.metric("kvroute_requests_total", worker="w", status="500",
                         api="tokenize") == 2
    assert router.metric("kvroute_retries_total") == 0


async def test_refused_connection_is_retried_and_all_failing_gives_502(
        make_router: RouterFactory) -> None:
    with EmulatorProcess(gpu="h100", time_scale=0.01, served_model_names=[MODEL]) as doomed, \
            EmulatorProcess(gpu="a100", time_scale=0.01, served_model_names=[MODEL]) as alive:
        fleet = url_fleet({"doomed": doomed.url, "alive": alive.url})
        # a high failure threshold keeps the stopped worker "healthy" in the router's view
        router = await make_router(fleet, ROUTING_ROUND_ROBIN, fail_threshold=10_000)
        doomed.stop()
        for _ in range(4):
            raw = await client(router).chat.completions.with_raw_response.create(
                model=MODEL, messages=MESSAGES, max_tokens=2)  # type: ignore[arg-type]
            assert raw.headers["x-kvroute-worker"] == "alive"
        assert router.metric("kvroute_retries_total", worker="doomed", reason="connect") >= 1
        # so are the utility requests, their failed attempts counted as the director's, and
        # their retries with the same model (the clients' success ratio subtracts one from
        # the other, by model)
        async with aiohttp.ClientSession() as session:
            for _ in range(4):
                async with session.post(router.url + "/tokenize",
                                        json={"model": MODEL, "prompt": "hi"}) as resp:
                    assert resp.status == 200 and resp.headers["x-kvroute-worker"] == "alive"
        retried = router.metric("kvroute_retries_total", worker="doomed", model=MODEL,
                                reason="connect")
        assert router.metric("kvroute_requests_total", worker="doomed", model=MODEL,
                             status="502") == retried
        assert router.metric("kvroute_requests_total", worker="doomed", api="tokenize") >= 1
        alive.stop()
        with pytest.raises(openai.APIStatusError) as info:
            await client(router).chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]
        assert info.value.status_code == 502
        assert isinstance(info.value.body, dict)
        assert info.value.body["code"] == "upstream_error"
        # the answer names the workers tried (it said "none" and "rejected before routing")
        headers = info.value.response.headers
        reason = headers["x-kvroute-reason"]
        assert reason.startswith("upstream-error: failed on "), reason
        tried = reason.removeprefix("upstream-error: failed on ").split("; last: ")[0]
        assert sorted(tried.split(", ")) == ["alive", "doomed"]
        assert headers["x-kvroute-worker"] == tried.split(", ")[-1]
        assert headers["x-kvroute-profile"] == "default"
        # the workers' addresses are the operator's: named by id, in the header and the body
        for text in (reason, info.value.body["message"]):
            assert "127.0.0.1" not in text and "Errno" not in text, text
        assert reason.split("; last: ")[1] in (
            "connect: the worker did not take the connection",
            "disconnect: the worker closed the connection before it answered"), reason


async def test_upstream_timeout_is_504(emulated_fleet: FleetConfig,
                                       make_router: RouterFactory,
                                       caplog: pytest.LogCaptureFixture) -> None:
    """A whole answer that never comes (its engine stalled) is a 504: past the upstream
    timeout it is waited for on only while its engine generates."""
    router = await make_router(subset(emulated_fleet, ["stall"]), upstream_timeout_s=0.3)
    with caplog.at_level(logging.INFO, logger="router.director"), \
            pytest.raises(openai.APIStatusError) as info:
        await client(router).chat.completions.create(model=MODEL, messages=MESSAGES,  # type: ignore[arg-type]
                                                     max_tokens=50)
    assert any("stall: The worker did not answer within" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert info.value.status_code == 504
    assert isinstance(info.value.body, dict) and info.value.body["code"] == "upstream_timeout"
    assert info.value.response.headers["x-kvroute-worker"] == "stall"


async def test_stream_broken_midway_ends_with_an_error_event(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    router = await make_router(subset(emulated_fleet, ["stall"]), upstream_timeout_s=0.5)
    stream = await client(router).chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=50, stream=True)  # type: ignore[arg-type]
    received = []
    with caplog.at_level(logging.INFO, logger="router.director"), \
            pytest.raises(openai.APIError) as info:
        async for chunk in stream:
            received.append(chunk)
    # the log names the request and the worker (it said nothing of a broken stream)
    assert any("stall broke its stream after" in r.getMessage() and "(504)" in r.getMessage()
               for r in caplog.records)
    assert "mid-stream: nothing came for 0.5 s" in info.value.message
    assert 1 <= len(received) <= 4          # role chunk and the tokens sent before the stall
    # silent past the upstream timeout: counted as the timeout it is (504), not a break
    assert router.metric("kvroute_requests_total", model=MODEL, worker="stall",
                         gpu="H100-80GB", profile="default", status="504") == 1.0


async def test_a_responses_stream_broken_midway_ends_with_its_own_error_event(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """It ended with a chat stream's error chunk and ``data: [DONE]``, which the Responses
    API never sends: a client dispatching on ``event:`` lines missed the failure."""
    import json
    router = await make_router(subset(emulated_fleet, ["stall"]), upstream_timeout_s=0.5)
    async with aiohttp.ClientSession() as session, session.post(
            f"{router.url}/v1/responses", json={"model": MODEL, "input": "Keep going.",
                                                "max_output_tokens": 50, "stream": True,
                                                "store": False}) as resp:
        assert resp.status == 200
        text = (await resp.read()).decode()
    events = [event for event in text.split("\n\n") if event.strip()]
    assert "[DONE]" not in text
    kind, data = events[-1].split("\n", 1)
    assert kind == "event: error"
    error = json.loads(data.removeprefix("data: "))
    assert error["type"] == "error" and error["code"] == "upstream_error"
    assert "mid-stream: nothing came for 0.5 s" in error["message"]
    numbers = [json.loads(e.split("data: ", 1)[1])["sequence_number"] for e in events[:-1]]
    assert numbers == list(range(len(numbers))) and len(numbers) >= 2
    assert error["sequence_number"] == len(numbers)        # the next in the stream's order


async def test_client_disconnect_cancels_upstream(emulated_fleet: FleetConfig,
                                                  make_router: RouterFactory,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # a loop stalled 0.5 s (a loaded machine) drops a request's times, by design
    # (test_loop_lag.py): this test asserts them
    monkeypatch.setattr(LoopStalls, "since", lambda self, start: False)
    slow = next(w.info for w in emulated_fleet.workers if w.info.id == "slow")
    router = await make_router(subset(emulated_fleet, ["slow"]))
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 4000, "stream": True}
    async with aiohttp.ClientSession() as session:
        await wait_running(session, slow.url, 0)       # requests of earlier tests are gone
        resp = await session.post(router.url + "/v1/chat/completions", json=body)
        assert resp.status == 200
        while b'"content"' not in await resp.content.readuntil(b"\n\n"):
            pass                                        # the stream has its first token
        await wait_running(session, slow.url, 1)
        resp.close()                                    # the client goes away
        await wait_running(session, slow.url, 0)
    # 4000 tokens at real time would take far longer than the deadline above
    await asyncio.sleep(0.1)
    assert router.metric("kvroute_requests_total", model=MODEL, worker="slow",
                         gpu="L40S-48GB", profile="default", status="499") == 1.0
    # its first token came: timed for the worker as for the client (it was for the client)
    assert router.metric("kvroute_client_ttft_seconds_count", model=MODEL) == 1
    assert router.metric("kvroute_ttft_seconds_count", worker="slow") == 1


async def wait_running(session: aiohttp.ClientSession, url: str, count: int) -> None:
    """Wait (5 s at most) until the worker reports ``count`` running requests."""
    deadline = time.monotonic() + 5.0
    while True:
        async with session.get(url + "/metrics") as resp:
            if parse_metrics(await resp.text()).running == count:
                return
        assert time.monotonic() < deadline, f"worker never had {count} running request(s)"
        await asyncio.sleep(0.05)


async def test_no_healthy_worker_is_503(make_router: RouterFactory) -> None:
    router = await make_router(url_fleet({"gone": f"http://127.0.0.1:{free_port()}"}))
    with pytest.raises(openai.APIStatusError) as info:
        await client(router).chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]
    assert info.value.status_code == 503
    assert isinstance(info.value.body, dict) and info.value.body["code"] == "no_worker_available"
    assert info.value.response.headers["x-kvroute-worker"] == "none"
    assert "healthy" in info.value.response.headers["x-kvroute-reason"]
    assert info.value.response.headers["Retry-After"] == "1"      # as an overloaded 503's
    async with aiohttp.ClientSession() as session:
        for path in ("/health", "/readiness"):
            async with session.get(router.url + path) as resp:
                assert resp.status == 503
                assert (await resp.json())["healthy_workers"] == 0
        # a liveness probe must not restart the router for its workers' outage
        async with session.get(router.url + "/liveness") as resp:
            assert resp.status == 200 and (await resp.json()) == {"status": "alive"}
        for method in ("GET", "POST"):        # vLLM's /ping: /health's status, no body
            async with session.request(method, router.url + "/ping") as resp:
                assert resp.status == 503 and await resp.read() == b""


async def test_garbage_metrics_mark_worker_stale_and_down(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["garbage", "a100-fast"]),
                               fail_threshold=2)
    await asyncio.sleep(0.3)                        # several scrape rounds
    async with aiohttp.ClientSession() as session:
        async with session.get(router.url + "/debug/fleet") as resp:
            workers = {w["id"]: w for w in (await resp.json())["data"]}
        assert workers["garbage"]["healthy"] is False
        assert workers["garbage"]["staleness_s"] is None        # never scraped successfully
        assert workers["garbage"]["consecutive_failures"] >= 2
        assert workers["garbage"]["last_error"]
        assert workers["a100-fast"]["healthy"] is True
        for _ in range(3):
            async with session.post(router.url + "/v1/chat/completions", data=orjson.dumps(
                    {"model": MODEL, "messages": MESSAGES, "max_tokens": 2})) as resp:
                assert resp.status == 200
                assert resp.headers["x-kvroute-worker"] == "a100-fast"
    assert router.metric("kvroute_worker_up", worker="garbage", gpu="L40S-48GB",
                         model=MODEL) == 0.0


async def test_a_worker_whose_host_is_gone_is_down_within_the_fail_threshold(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A scrape that times out is a busy worker's, kept up for ``slow_grace_s`` (10 s); a
    host gone (connection attempts unanswered) timed out the same way, the scrape's 1 s
    timeout coming before the 2 s connect timeout: requests kept going to it for 10 s."""
    backend = subset(emulated_fleet, ["h100-fast"]).workers[0].info.url
    worker = FrontedWorker(backend, _fail)
    await worker.__aenter__()
    router = await make_router(url_fleet({"w": worker.url}))
    port = int(worker.url.rsplit(":", 1)[1])
    loop = asyncio.get_running_loop()
    while not (await fleet_entry(router, "w"))["healthy"]:
        await asyncio.sleep(0.05)
    await worker.__aexit__()          # its server and connections go; its address stays,
    gone = socket.socket()            # its connection attempts unanswered (a full queue)
    gone.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    gone.bind(("127.0.0.1", port))
    gone.listen(0)
    queued = socket.create_connection(("127.0.0.1", port))
    try:
        gone_at = loop.time()
        while (await fleet_entry(router, "w"))["healthy"]:
            assert loop.time() - gone_at < 6.0, "still taken for a busy worker"
            await asyncio.sleep(0.1)
        assert "no connection to" in (await fleet_entry(router, "w"))["last_error"]
    finally:
        queued.close()
        gone.close()


async def _answer_with_headers_of_its_own(request: web.Request) -> web.StreamResponse:
    """A worker's answers with header fields of its own: a 429 with ``Retry-After`` for
    ``max_tokens: 1``, else a short stream."""
    body = await request.json()
    own = {"x-worker-note": "hello", "x-request-id": "the-worker's-own", "Keep-Alive": "timeout=5",
           "Strict-Transport-Security": "max-age=63072000", "Alt-Svc": 'h3=":443"'}
    if body.get("max_tokens") == 1:
        return web.json_response({"error": {"message": "busy", "type": "rate_limit_error",
                                            "code": 429}},
                                 status=429, headers={**own, "Retry-After": "7"})
    response = web.StreamResponse(headers={**own, "Content-Type": "text/event-stream"})
    await response.prepare(request)
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": MODEL,
             "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
    await response.write(b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n")
    await response.write_eof()
    return response


async def test_a_workers_own_header_fields_reach_the_client(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A worker's 429 said when to come back (``Retry-After``), which the router dropped
    with every other field of the worker's; those of its connection are still not relayed,
    and the router's own (its request id) win."""
    async with scripted_router(
            emulated_fleet, make_router, _answer_with_headers_of_its_own) as router, \
            aiohttp.ClientSession() as session:
        for stream, max_tokens, status in ((False, 1, 429), (True, 8, 200)):
            async with session.post(f"{router.url}/v1/chat/completions", json={
                    "model": MODEL, "messages": MESSAGES, "max_tokens": max_tokens,
                    "stream": stream}, headers={"x-request-id": "client-7"}) as resp:
                body = await resp.read()
                assert resp.status == status, body
                assert resp.headers["x-worker-note"] == "hello"
                assert resp.headers.getall("x-request-id") == ["client-7"]
                assert "Keep-Alive" not in resp.headers
                # those binding the router's origin are the router's to send
                assert "Strict-Transport-Security" not in resp.headers
                assert "Alt-Svc" not in resp.headers
                assert resp.headers["x-kvroute-worker"] == "w"
                if stream:
                    assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
                    assert body.endswith(b"data: [DONE]\n\n")
                else:
                    assert resp.headers["Retry-After"] == "7"
                    assert orjson.loads(body)["error"]["message"] == "busy"


async def _whole_stream_then_hang_up(request: web.Request) -> web.StreamResponse:
    """Every event of a stream, ``[DONE]`` included, then the connection cut before the
    chunked body's last chunk."""
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": MODEL,
             "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
    await response.write(b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n")
    await asyncio.sleep(0.05)
    assert request.transport is not None
    request.transport.abort()
    return response


async def test_a_stream_whose_last_event_was_relayed_is_answered_however_its_body_ends(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """It was counted a 502 and a failure of the worker (four such answers and one 500
    ejected it), and the client got an error event after ``[DONE]``."""
    async with scripted_router(
            emulated_fleet, make_router, _whole_stream_then_hang_up, eject_after=1) as router, \
            aiohttp.ClientSession() as session:
        for _ in range(2):
            async with session.post(f"{router.url}/v1/chat/completions", json={
                    "model": MODEL, "messages": MESSAGES, "max_tokens": 8,
                    "stream": True}) as resp:
                body = await resp.read()
            assert resp.status == 200
            assert body.endswith(b"data: [DONE]\n\n") and body.count(b"[DONE]") == 1
            assert b"error" not in body
    assert router.metric("kvroute_requests_total", worker="w", status="200") == 2
    assert router.metric("kvroute_requests_total", worker="w", status="502") == 0
    assert router.metric("kvroute_worker_ejections_total", worker="w") == 0


async def _head_then_hang_up(request: web.Request) -> web.StreamResponse:
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "application/json",
                                           "Content-Length": "100"})
    await response.prepare(request)
    await response.write(b'{"id": ')
    await asyncio.sleep(0.05)
    assert request.transport is not None
    request.transport.abort()
    return response


async def test_an_answer_that_breaks_off_after_its_head_is_told_as_such(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """The client read "the worker closed the connection before it answered" for an answer
    whose head had come."""
    async with scripted_router(emulated_fleet, make_router, _head_then_hang_up) as router, \
            aiohttp.ClientSession() as session, session.post(
            f"{router.url}/v1/chat/completions",
            json={"model": MODEL, "messages": MESSAGES, "max_tokens": 2}) as resp:
        assert resp.status == 502
        message = (await resp.json())["error"]["message"]
    assert "disconnect: the worker's answer broke off before it was whole" in message


async def _sidecar_503(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(status=503, text=(
        "upstream=10.42.7.19:8000 host=vllm-h100-0.gpu.prod.internal\n"
        "2026-12-06 14:02:00 WARNING workers.scraper: worker a100-0: scrape failed (forged)\n"
        'Traceback (most recent call last):\n  File "/srv/vllm/engine.py", line 1\n'))


async def test_a_workers_5xx_body_reaches_no_client_and_no_log_line_of_its_own(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    """A sidecar's 503 page reached the client whole (internal addresses, a traceback's
    paths) in the body and ``x-kvroute-reason``, and its line breaks split the router's log
    record into lines, one passing for a line of the router's own. The client is told the
    status; the log keeps the body, on one line."""
    caplog.set_level(logging.INFO, logger="router.director")
    async with scripted_router(emulated_fleet, make_router, _sidecar_503) as router, \
            aiohttp.ClientSession() as session, session.post(
                router.url + "/v1/chat/completions",
                json={"model": MODEL, "messages": MESSAGES, "max_tokens": 2}) as resp:
        body = await resp.text()
        reason = resp.headers["x-kvroute-reason"]
    assert resp.status == 502
    for told in (body, reason):
        assert "the worker answered HTTP 503" in told
        assert "10.42.7.19" not in told and "engine.py" not in told and "forged" not in told
    [logged] = [r.getMessage() for r in caplog.records if "failed (http_5xx" in r.getMessage()]
    assert "\n" not in logged and "HTTP 503: upstream=10.42.7.19" in logged


async def test_a_workers_501_is_relayed_as_it_came_not_tried_elsewhere(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """vLLM's 501 (what its engine does not do) is the same on every worker of the model: it
    was tried on each, counted toward ejecting them, and answered 502."""
    asked: list[int] = []
    not_done = {"error": {"message": "Beam search is not implemented for this request.",
                          "type": "NotImplementedError", "param": None, "code": 501}}

    async def not_implemented(request: web.Request) -> web.Response:
        await request.read()
        asked.append(1)
        return web.json_response(not_done, status=501)

    async with scripted_router(emulated_fleet, make_router, not_implemented,
                               eject_after=1) as router, aiohttp.ClientSession() as session:
        for _ in range(2):
            async with session.post(router.url + "/v1/completions", json={
                    "model": MODEL, "prompt": "hi", "max_tokens": 2}) as resp:
                assert resp.status == 501
                assert await resp.json() == not_done
        assert len(asked) == 2                       # once each: not tried again
        assert (await fleet_entry(router, "w"))["ejected_for_s"] == 0


async def test_a_stream_broken_by_its_worker_is_told_in_words(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A worker whose connection dropped mid-stream: the client's error event named the
    router's own exception class ("The worker stopped mid-stream: UpstreamPayloadError")."""
    async def broken(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"id": "cmpl-1", "object": "text_completion", '
                             b'"choices": [{"index": 0, "text": "a"}]}\n\n')
        assert request.transport is not None
        request.transport.close()                # gone, the chunked body unfinished
        return response

    async with scripted_router(emulated_fleet, make_router, broken) as router, \
            aiohttp.ClientSession() as session, session.post(
                router.url + "/v1/completions", json={"model": MODEL, "prompt": "hi",
                                                      "max_tokens": 5, "stream": True}) as resp:
        lines = [line.strip() async for line in resp.content if line.startswith(b"data:")]
    assert lines[-1] == b"data: [DONE]", lines
    message = orjson.loads(lines[-2].removeprefix(b"data: "))["error"]["message"]
    assert message == ("The worker stopped mid-stream: its answer ended early or was badly "
                       "framed."), message


def test_a_workers_json_error_message_is_told_with_its_status() -> None:
    vllm = '{"error": {"message": "EngineCore encountered an issue.", "code": 500}}'
    assert RetryableUpstream("http_5xx", 500, f"HTTP 500: {vllm}").client_text() == (
        "http_5xx: the worker answered HTTP 500: EngineCore encountered an issue.")
    flat = '{"object": "error", "message": "busy\\nnow", "code": 503}'
    assert RetryableUpstream("http_5xx", 503, f"HTTP 503: {flat}").client_text() == (
        "http_5xx: the worker answered HTTP 503: busy now")


def test_a_busy_worker_is_vllms_503_for_a_full_queue_or_one_with_retry_after() -> None:
    """vLLM's full queue is a busy engine, up; a proxy's 503 page, vLLM's 503 for a failed
    request, or a 500 is a failure."""
    def error(message: str) -> str:
        return orjson.dumps({"error": {"message": message, "type": "Service Unavailable",
                                       "param": None, "code": 503}}).decode()

    busy = error("The engine is currently busy and cannot accept new requests.")
    backlog = error("The engine has reached its prefill token backlog limit. Please retry.")
    assert RetryableUpstream("http_5xx", 503, f"HTTP 503: {busy}").busy
    assert RetryableUpstream("http_5xx", 503, f"HTTP 503: {backlog}").busy
    assert RetryableUpstream("http_5xx", 503, "HTTP 503: <html>later</html>",
                             retry_after="5").busy
    assert not RetryableUpstream("http_5xx", 503, "HTTP 503: <html>no upstream</html>").busy
    assert not RetryableUpstream("http_5xx", 503, f"HTTP 503: {error('KV load failed')}").busy
    assert not RetryableUpstream("http_5xx", 500, f"HTTP 500: {busy}").busy
    assert not RetryableUpstream("connect", 503, "refused").busy


def test_an_engine_error_is_vllms_500_with_its_json_error() -> None:
    """What may be the request's doing (judged when it ends): vLLM's own 500; a gateway's
    JSON 502 in front of dead workers, or a page, is the worker's failure at once."""
    vllm = orjson.dumps({"error": {"message": "", "type": "InternalServerError",
                                   "param": None, "code": 500}}).decode()
    flat = orjson.dumps({"object": "error", "message": "x", "type": "InternalServerError",
                         "code": 500}).decode()
    gateway = orjson.dumps({"message": "An invalid response was received from upstream"})
    long = orjson.dumps({"error": {"message": "schema " * 1000, "type": "InternalServerError",
                                   "param": None, "code": 500}}).decode()
    for body in (vllm, flat, long):       # (a long one judged whole, not as the log keeps it)
        assert RetryableUpstream.answered(500, body, None).engine_error
    assert not RetryableUpstream.answered(502, vllm, None).engine_error
    assert not RetryableUpstream.answered(500, gateway.decode(), None).engine_error
    assert not RetryableUpstream.answered(500, "<html>oops</html>", None).engine_error
    assert not RetryableUpstream("disconnect", 500, f"x: {vllm}").engine_error


@pytest.mark.parametrize(("status", "worker_failed", "cut"), [
    (499, True, True), (504, True, True), (502, False, True),    # client left, wait, size
    (502, True, False), (200, True, False), (400, True, False)])  # the worker's own end
def test_a_request_is_cut_at_its_worker_when_the_router_closed_it_while_it_ran(
        status: int, worker_failed: bool, cut: bool) -> None:
    result = ProxyResult(web.StreamResponse(), status, None, None, 0.0,
                         worker_failed=worker_failed)
    assert cut_at_worker(status, result) is cut
    assert cut_at_worker(499, None) and not cut_at_worker(502, None)
