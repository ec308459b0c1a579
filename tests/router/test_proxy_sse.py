"""``router.proxy`` byte relay against an in-process upstream that chops SSE events at awkward
places: usage chunk split across writes, several events per write, pass-through of 4xx, a
stream that ends without ``[DONE]``."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from router.errors import UpstreamError as UpstreamAnswerError
from router.proxy import (
    COMPLETION_STREAM,
    MESSAGES_STREAM,
    RESPONSES_STREAM,
    CancelledAfterTheEnd,
    Proxy,
    ProxyResult,
    RetryableUpstream,
    StreamFormat,
    _StreamRelay,
)
from router.proxy_usage import UsageRewrite
from workers.upstream import MAX_HEAD, UpstreamClient

CHUNK = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"%d"}}]}\n\n'
USAGE = (b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":7,"total_tokens":10,'
         b'"completion_tokens":3}}\n\n')
DONE = b"data: [DONE]\n\n"
FINISH = b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
FP_USAGE = (b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":7,"total_tokens":10,'
            b'"completion_tokens":3},"system_fingerprint":"vllm-0.32.0-3efed959"}\n\n')


def _pieces(mode: str) -> Sequence[bytes]:
    events = b"".join(CHUNK % i for i in range(3))
    if mode == "split-usage":
        return [events, USAGE[:25], USAGE[25:60], USAGE[60:] + DONE]
    if mode == "one-write":
        return [events + USAGE + DONE]
    if mode == "byte-by-byte":
        data = events + USAGE + DONE
        return [data[i:i + 1] for i in range(len(data))]
    if mode == "fingerprint":
        data = b"".join(CHUNK % i for i in range(2)) + FINISH + FP_USAGE + DONE
        return [data[i:i + 7] for i in range(0, len(data), 7)]
    if mode == "no-done":
        return [events]
    if mode == "data-in-text":        # a model writing "data:" in its answer
        text = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"x data: y data:"}}]}'
        return [text + b"\n\n" + text + b"\n\n" + USAGE + DONE]
    if mode == "done-in-text":        # a model writing "data: [DONE]", then the worker breaks
        return [b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"x data: [DONE]"}}]}'
                b"\n\n"]
    if mode == "empty":
        return []
    if mode == "crlf":                 # SSE lines ending in CRLF, cut between CR and LF too
        data = (events + USAGE + DONE).replace(b"\n", b"\r\n")
        return [data[i:i + 5] for i in range(0, len(data), 5)]
    if mode == "big-after-start":      # a first event, then one that never ends
        return [CHUNK % 0, b'data: {"id":"c","choices":[{"delta":{"content":"' + b"x" * 1500]
    if mode == "endless":              # an event that never ends
        return [b'data: {"id":"c","choices":[{"delta":{"content":"' + b"x" * 600] + [
            b"y" * 600] * 3
    if mode in ("done-then-hold", "hold-before-done", "done-then-hold-long"):
        return [events, USAGE + DONE]
    if mode in ERROR_EVENTS:            # vLLM's error event: first, or after two tokens
        first, error = ERROR_EVENTS[mode]
        return [b"".join(CHUNK % i for i in range(0 if first else 2)), error + DONE]
    if mode == "usage-no-done":        # the whole answer, the worker's [DONE] missing
        return [events, USAGE]
    if mode == "done-no-blank":        # the last event's blank line missing
        return [events, USAGE + DONE[:-1]]
    if mode == "done-no-blank-cr":     # ... its lines ending in CR
        return [(events + USAGE + DONE[:-1]).replace(b"\n", b"\r")]
    if mode in OTHER_LAYOUTS:          # SSE's other ways of writing the same events
        return [OTHER_LAYOUTS[mode](events + FINISH + USAGE + DONE)]
    raise AssertionError(mode)


def _error(code: int, old: bool = False) -> bytes:
    """vLLM's error event (``old``: the flat body of v0.10.0 and before)."""
    body = {"message": "EngineCore encountered an issue.", "type": "InternalServerError",
            "param": None, "code": code}
    return b"data: " + orjson.dumps({"object": "error", **body} if old else {"error": body}) + (
        b"\n\n")


ERROR_EVENTS = {"error-first": (True, _error(500)), "error-mid": (False, _error(500)),
                "error-mid-old": (False, _error(503, old=True)),
                "error-first-400": (True, _error(400)), "error-mid-400": (False, _error(400))}


def _with_fields(data: bytes) -> bytes:
    return data.replace(b"data: ", b"event: chunk\nid: 7\ndata: ")


def _over_two_lines(data: bytes) -> bytes:
    """Each JSON object's data cut over two ``data:`` lines after its first comma."""
    return b"\n\n".join(event.replace(b",", b",\ndata: ", 1) if event.startswith(b"data: {")
                        else event for event in data.split(b"\n\n"))


OTHER_LAYOUTS: dict[str, Callable[[bytes], bytes]] = {
    "keep-alive": lambda data: b": keep-alive\n\n" + data.replace(b"\n\n", b"\n\n: ping\n\n", 2),
    "fields": _with_fields,
    "no-space": lambda data: data.replace(b"data: ", b"data:"),
    "two-data-lines": _over_two_lines,
    "lone-cr": lambda data: data.replace(b"\n", b"\r"),
}


FLOOD_EVENTS = 2000            # events of 10 kB: 20 MB, more than any socket buffers
FLOOD_EVENT = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"' + b"x" * 10_000 + (
    b'"}}]}\n\n')
FLOOD_SEEN = web.AppKey("flood", dict[str, object])


async def _flood(request: web.Request) -> web.StreamResponse:
    """A worker streaming 20 MB as fast as it is read; ``request.app[FLOOD_SEEN]`` learns how
    many events it wrote and whether its connection was closed under it."""
    seen = request.app[FLOOD_SEEN]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    try:
        for _ in range(FLOOD_EVENTS):
            await response.write(FLOOD_EVENT)
            seen["written"] += 1
        await response.write(DONE)
    except (ConnectionResetError, aiohttp.ClientConnectionResetError, asyncio.CancelledError):
        seen["closed"] = True
        raise
    return response


async def _upstream(request: web.Request) -> web.StreamResponse:
    mode = request.query["mode"]
    if mode == "bad-request":
        return web.json_response({"error": {"message": "too long", "code": 400}}, status=400)
    if mode == "crash":
        return web.json_response({"error": "boom"}, status=503)
    if mode == "redirect":
        raise web.HTTPTemporaryRedirect("http://10.1.2.3:8000/v1/chat/completions")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for piece in _pieces(mode):
        if mode == "hold-before-done" and piece.endswith(DONE):
            await asyncio.sleep(1.0)      # the worker still generating
        await response.write(piece)
        await asyncio.sleep(0)
    if mode == "done-then-hold":          # the connection stays open a while after [DONE]
        await asyncio.sleep(1.0)
    if mode == "done-then-hold-long":     # ... longer than the upstream timeout
        await asyncio.sleep(3.0)
    return response


@pytest.fixture
async def relay_url() -> AsyncIterator[tuple[str, list[ProxyResult | Exception]]]:
    upstream = TestServer(_make_app("/v1/chat/completions", _upstream), host="127.0.0.1")
    await upstream.start_server()
    results: list[ProxyResult | Exception] = []
    client = UpstreamClient(connect_timeout_s=1.0, read_timeout_s=2.0)
    proxy = Proxy(client, upstream_timeout_s=2.0)

    async def relay(request: web.Request) -> web.StreamResponse:
        url = str(upstream.make_url("/v1/chat/completions")) + "?" + request.query_string
        try:
            result = await proxy.forward(
                request, url, b"{}", {}, {"x-kvroute-worker": "w1"}, stream=True,
                wants_usage=request.query.get("usage") == "1", on_first_byte=lambda: None)
        except (RetryableUpstream, UpstreamAnswerError) as exc:
            results.append(exc)
            return web.Response(status=599)
        results.append(result)
        return result.response

    front = TestServer(_make_app("/relay", relay), host="127.0.0.1")
    await front.start_server()
    yield str(front.make_url("/relay")), results
    await client.close()
    await front.close()
    await upstream.close()


def _make_app(path: str, handler: object) -> web.Application:
    app = web.Application()
    app.router.add_post(path, handler)  # type: ignore[arg-type]
    return app


async def _get(url: str, query: str) -> tuple[int, bytes, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.post(f"{url}?{query}") as resp:
        return resp.status, await resp.read(), dict(resp.headers)


@pytest.mark.parametrize("mode", ["split-usage", "one-write", "byte-by-byte"])
@pytest.mark.parametrize("wants_usage", [False, True], ids=["usage stripped", "usage kept"])
async def test_relay_reads_and_strips_usage(relay_url: tuple[str, list[ProxyResult | Exception]],
                                            mode: str, wants_usage: bool) -> None:
    url, results = relay_url
    status, body, headers = await _get(url, f"mode={mode}&usage={int(wants_usage)}")
    events = b"".join(CHUNK % i for i in range(3))
    assert status == 200 and headers["x-kvroute-worker"] == "w1"
    assert headers["Content-Type"] == "text/event-stream; charset=utf-8"    # vLLM's
    assert body == events + (USAGE if wants_usage else b"") + DONE
    [result] = results
    assert isinstance(result, ProxyResult) and result.status == 200
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (7, 3)
    assert result.first_byte_at is not None and result.finished_at >= result.first_byte_at


async def test_data_written_in_a_tokens_text_is_no_event(
        relay_url: tuple[str, list[ProxyResult | Exception]]) -> None:
    """Counted in the bytes, each "data:" of a token's text was an event more: charged to
    the client's budget, and a Responses error event's sequence number skipped ahead."""
    url, results = relay_url
    status, _, _ = await _get(url, "mode=data-in-text&usage=1")
    [result] = results
    assert status == 200 and isinstance(result, ProxyResult)
    assert result.events == 4           # two tokens, the usage, [DONE]


@pytest.mark.parametrize("wants_usage", [False, True], ids=["usage stripped", "usage kept"])
async def test_fingerprint_moves_to_the_finish_chunk_when_usage_is_stripped(
        relay_url: tuple[str, list[ProxyResult | Exception]], wants_usage: bool) -> None:
    url, results = relay_url
    status, body, _ = await _get(url, f"mode=fingerprint&usage={int(wants_usage)}")
    tokens = b"".join(CHUNK % i for i in range(2))
    stamped = FINISH[:-3] + b',"system_fingerprint":"vllm-0.32.0-3efed959"}\n\n'
    expected = tokens + (FINISH + FP_USAGE if wants_usage else stamped) + DONE
    assert status == 200 and body == expected
    [result] = results
    assert isinstance(result, ProxyResult) and result.usage is not None
    assert result.usage.completion_tokens == 3


async def test_stream_without_done_ends_with_error_event(
        relay_url: tuple[str, list[ProxyResult | Exception]]) -> None:
    url, results = relay_url
    status, body, _ = await _get(url, "mode=no-done")
    assert status == 200
    events = body.split(b"\n\n")
    assert events[:3] == [(CHUNK % i)[:-2] for i in range(3)]
    error = orjson.loads(events[3].removeprefix(b"data: "))
    assert error["error"]["code"] == "upstream_error"
    assert events[4:] == [b"data: [DONE]", b""]
    [result] = results
    assert isinstance(result, ProxyResult) and result.status == 502


async def test_a_tokens_text_ending_in_done_does_not_end_the_stream(
        relay_url: tuple[str, list[ProxyResult | Exception]]) -> None:
    """Matched anywhere in the bytes, "data: [DONE]" in a token's text ended the stream: the
    worker breaking after it was a whole answer (200, no error event to the client)."""
    url, results = relay_url
    status, body, _ = await _get(url, "mode=done-in-text&usage=1")
    events = body.split(b"\n\n")
    assert status == 200 and len(events) == 4, events
    assert orjson.loads(events[1].removeprefix(b"data: "))["error"]["code"] == "upstream_error"
    assert events[2:] == [b"data: [DONE]", b""]
    [result] = results
    assert isinstance(result, ProxyResult) and result.status == 502


async def test_4xx_passes_through_and_5xx_is_retryable(
        relay_url: tuple[str, list[ProxyResult | Exception]]) -> None:
    url, results = relay_url
    status, body, headers = await _get(url, "mode=bad-request")
    assert status == 400 and headers["x-kvroute-worker"] == "w1"
    assert orjson.loads(body) == {"error": {"message": "too long", "code": 400}}
    status, _, _ = await _get(url, "mode=crash")
    assert status == 599
    failure = results[-1]
    assert isinstance(failure, RetryableUpstream)
    assert (failure.reason, failure.status) == ("http_5xx", 503)


async def test_stream_closed_before_any_byte_is_retryable(
        relay_url: tuple[str, list[ProxyResult | Exception]]) -> None:
    url, results = relay_url
    status, _, _ = await _get(url, "mode=empty")
    assert status == 599
    [failure] = results
    assert isinstance(failure, RetryableUpstream) and failure.reason == "disconnect"


@pytest.mark.parametrize("leaves", ["after [DONE]", "before [DONE]"])
async def test_a_client_leaving_after_the_last_event_got_the_whole_answer(leaves: str) -> None:
    """A client that stops reading at [DONE] and closes cancels the request while the worker's
    stream is still open: it was counted as 499 and lost its usage and cost. Cancelled after
    the last event was written, the cancellation carries the whole answer's result."""
    upstream = TestServer(_make_app("/v1/chat/completions", _upstream), host="127.0.0.1")
    await upstream.start_server()
    client = UpstreamClient(connect_timeout_s=1.0, read_timeout_s=5.0)
    proxy = Proxy(client, upstream_timeout_s=5.0)
    ended: asyncio.Future[BaseException | ProxyResult] = (
        asyncio.get_running_loop().create_future())
    mode = "done-then-hold" if leaves == "after [DONE]" else "hold-before-done"

    async def relay(request: web.Request) -> web.StreamResponse:
        try:
            result = await proxy.forward(
                request, str(upstream.make_url("/v1/chat/completions")) + f"?mode={mode}",
                b"{}", {}, {}, stream=True, wants_usage=False, on_first_byte=lambda: None)
        except BaseException as exc:
            ended.set_result(exc)
            raise
        ended.set_result(result)
        return result.response

    front = TestServer(_make_app("/relay", relay), host="127.0.0.1", handler_cancellation=True)
    await front.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            resp = await session.post(str(front.make_url("/relay")))
            received = b""
            mark = DONE if leaves == "after [DONE]" else b"data:"
            while mark not in received:
                received += await resp.content.readany()
            resp.close()                          # gone, the worker's stream still open
        cancelled = await asyncio.wait_for(ended, 5.0)
    finally:
        await client.close()
        await front.close()
        await upstream.close()
    if leaves == "before [DONE]":
        assert isinstance(cancelled, asyncio.CancelledError)
        assert not isinstance(cancelled, CancelledAfterTheEnd)     # a 499, as before
        return
    # the answer ends with its last event now (the worker's body read on apart): its
    # result, or the cancellation that carries it when the client left first
    assert isinstance(cancelled, (CancelledAfterTheEnd, ProxyResult))
    result = cancelled.result if isinstance(cancelled, CancelledAfterTheEnd) else cancelled
    assert result.status == 200 and result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (7, 3)
    assert result.first_byte_at is not None and result.events == 4


async def _flood_relay(send_timeout_s: float, reader: Callable[[int], Awaitable[bytes]],
                       worker: Callable[[web.Request], Awaitable[web.StreamResponse]] = _flood,
                       send_buffer: int | None = None
                       ) -> tuple[ProxyResult | BaseException, dict[str, object], bytes]:
    """``reader(port)`` reads the relay's answer to one request (written by ``worker``) as a
    client does; the result, what the worker saw and what the client read. ``send_buffer``:
    the kernel's send buffer of the relay's socket to the client (a network that holds
    little in flight)."""
    upstream_app = _make_app("/v1/chat/completions", worker)
    upstream_app[FLOOD_SEEN] = seen = {"written": 0, "closed": False}
    upstream = TestServer(upstream_app, host="127.0.0.1", handler_cancellation=True)
    await upstream.start_server()
    client = UpstreamClient(connect_timeout_s=1.0, read_timeout_s=10.0)
    proxy = Proxy(client, upstream_timeout_s=10.0, send_timeout_s=send_timeout_s)
    ended: asyncio.Future[ProxyResult | BaseException] = (
        asyncio.get_running_loop().create_future())

    async def relay(request: web.Request) -> web.StreamResponse:
        if send_buffer is not None:
            assert request.transport is not None
            request.transport.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        try:
            result = await proxy.forward(
                request, str(upstream.make_url("/v1/chat/completions")), b"{}", {}, {},
                stream=True, wants_usage=True, on_first_byte=lambda: None)
        except BaseException as exc:
            ended.set_result(exc)
            raise
        ended.set_result(result)
        return result.response

    front = TestServer(_make_app("/relay", relay), host="127.0.0.1")
    await front.start_server()
    try:
        assert front.port is not None
        read = await reader(front.port)
        result = await asyncio.wait_for(ended, 10.0)
    finally:
        await client.close()
        await front.close()
        await upstream.close()
    return result, seen, read


async def _raw_request(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)     # a small window
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"POST /relay HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    await writer.drain()
    return reader, writer


def _reading(size: int) -> Callable[[int], Awaitable[bytes]]:
    """A client reading its answer ``size`` bytes at a time, one read each 10 ms."""
    async def reads(port: int) -> bytes:
        reader, writer = await _raw_request(port)
        received = bytearray()      # appended in place: a bytes += of 20 MB is quadratic,
        try:                        # seconds of this loop's time on a busy machine
            while chunk := await asyncio.wait_for(reader.read(size), 5.0):
                received += chunk
                if received.endswith(b"0\r\n\r\n"):        # the chunked body's end
                    break
                await asyncio.sleep(0.01)
        finally:
            writer.close()
        return bytes(received)

    return reads


async def test_a_client_that_reads_nothing_is_cut_after_the_send_timeout(
        caplog: pytest.LogCaptureFixture) -> None:
    """A client that sent a streaming request and never read its answer held its in-flight
    slot and its worker's request for as long as its connection stayed open: a write that
    cannot go on for ``send_timeout_s`` now closes the connection, and the request ends as
    one whose client left, its worker's stream closed."""
    async def never_reads(port: int) -> bytes:
        reader, writer = await _raw_request(port)
        await asyncio.sleep(2.5)       # the timeout (0.5 s) passes while nothing is read
        try:
            return await asyncio.wait_for(reader.read(), 5.0)   # what was sent, then the end
        except ConnectionResetError:
            return b"(reset)"
        finally:
            writer.close()

    caplog.set_level(logging.INFO)
    result, seen, read = await _flood_relay(0.5, never_reads)
    assert isinstance(result, ProxyResult) and result.status == 499
    assert "read nothing of its stream for 0.5 s: its connection is closed" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert seen["closed"] is True                  # the worker's stream was closed under it
    assert isinstance(seen["written"], int) and seen["written"] < FLOOD_EVENTS
    assert not read.endswith(DONE)


async def test_a_client_reading_along_is_not_cut() -> None:
    result, seen, read = await _flood_relay(0.5, _reading(1 << 20))
    assert isinstance(result, ProxyResult) and result.status == 200
    assert seen == {"written": FLOOD_EVENTS, "closed": False}
    assert read.count(b"data: ") == FLOOD_EVENTS + 1 and DONE in read


BIG_EVENT = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"' + b"x" * 2_000_000 + (
    b'"}}]}\n\n')


async def _one_big_event(request: web.Request) -> web.StreamResponse:
    """A worker whose answer is one event of 2 MB (a long prompt's logprobs), then [DONE]."""
    seen = request.app[FLOOD_SEEN]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(BIG_EVENT)
    seen["written"] += 1
    await response.write(DONE)
    return response


async def test_a_client_reading_one_big_event_slowly_is_not_cut() -> None:
    """The send timeout timed a whole write: a client reading an event of megabytes along,
    slower than it came, was cut at the timeout (and logged as reading nothing). It times
    the client's silence, as nginx's ``send_timeout`` does."""
    started = time.monotonic()         # (16 kB each 10 ms: about 1.6 MB/s)
    result, seen, read = await _flood_relay(0.5, _reading(16_384), _one_big_event, 4096)
    assert time.monotonic() - started > 1.0         # the write waited past the timeout
    assert isinstance(result, ProxyResult) and result.status == 200
    assert seen == {"written": 1, "closed": False}
    assert len(read) > len(BIG_EVENT) and DONE in read


def test_a_client_reading_one_big_event_slowly_is_not_cut_under_uvloop() -> None:
    """The router serves on uvloop, whose transports derive from none of asyncio's classes:
    the watch of a write that waited for its client asserted an ``asyncio.WriteTransport``,
    and the AssertionError ended the stream with a 500 written into its chunked body (every
    long stream to a client slower than its worker)."""
    import uvloop

    result, seen, read = uvloop.run(
        _flood_relay(0.5, _reading(16_384), _one_big_event, 4096))
    assert isinstance(result, ProxyResult) and result.status == 200
    assert seen == {"written": 1, "closed": False}
    assert len(read) > len(BIG_EVENT) and DONE in read
    assert b"Internal Server Error" not in read


def test_a_write_is_timed_while_writing_is_paused_below_the_high_water_mark() -> None:
    """Writing resumes only once the buffer drains below the low-water mark: a client that
    filled it, read a little back and stopped left a drain waiting with no timer."""
    from types import SimpleNamespace

    from router.proxy import COMPLETION_STREAM, _StreamRelay
    from router.proxy_usage import UsageRewrite

    class Transport:
        def __init__(self, buffered: int) -> None:
            self.buffered = buffered

        def get_write_buffer_size(self) -> int:
            return self.buffered

        def get_write_buffer_limits(self) -> tuple[int, int]:
            return 16_384, 65_536

    def relay(buffered: int, paused: bool) -> _StreamRelay:
        request = SimpleNamespace(transport=Transport(buffered),
                                  protocol=SimpleNamespace(writing_paused=paused))
        return _StreamRelay(request, {}, UsageRewrite(False, None),  # type: ignore[arg-type]
                            COMPLETION_STREAM)

    assert not relay(0, False)._may_wait(200)              # a client reading along
    assert relay(65_400, False)._may_wait(200)             # this write pauses it
    assert relay(40_000, True)._may_wait(0)                # paused, between the marks
    assert not relay(40_000, False)._may_wait(200)         # not paused: the write goes on


async def test_an_answer_whose_head_is_too_large_is_a_502_not_retried() -> None:
    """vLLM describes a binary pooling answer's every vector in a header: over the head limit
    that is the answer's size, not a failing worker (it was retried, and each worker tried
    was counted as failing toward its ejection)."""
    async def huge_head(request: web.Request) -> web.Response:
        return web.Response(body=b"\0" * 8, content_type="application/octet-stream",
                            headers={"metadata": "m" * (MAX_HEAD + 1)})

    upstream = TestServer(_make_app("/pooling", huge_head), host="127.0.0.1")
    await upstream.start_server()
    client = UpstreamClient(connect_timeout_s=1.0, read_timeout_s=10.0)
    proxy = Proxy(client, upstream_timeout_s=10.0)
    raised: list[BaseException] = []

    async def relay(request: web.Request) -> web.StreamResponse:
        try:
            result = await proxy.forward(
                request, str(upstream.make_url("/pooling")), b"{}", {}, {}, stream=False,
                wants_usage=False, on_first_byte=lambda: None)
        except BaseException as exc:
            raised.append(exc)
            return web.Response(status=599)
        return result.response

    front = TestServer(_make_app("/relay", relay), host="127.0.0.1")
    await front.start_server()
    try:
        async with aiohttp.ClientSession() as session, session.post(
                str(front.make_url("/relay"))) as resp:
            assert resp.status == 599
    finally:
        await client.close()
        await front.close()
        await upstream.close()
    assert len(raised) == 1 and isinstance(raised[0], UpstreamAnswerError)
    assert not isinstance(raised[0], RetryableUpstream) and raised[0].status == 502
    assert "header too large to relay" in str(raised[0])


async def test_events_with_lines_ending_in_crlf_are_relayed(
        relay_url: tuple[str, list[ProxyResult | Exception]]) -> None:
    """An SSE stream whose lines end in CRLF was "an empty stream" (502, retried)."""
    url, results = relay_url
    status, body, _ = await _get(url, "mode=crlf&usage=1")
    assert status == 200
    assert body == b"".join(CHUNK % i for i in range(3)) + USAGE + DONE
    [result] = results
    assert isinstance(result, ProxyResult) and result.status == 200
    assert result.usage is not None and result.usage.completion_tokens == 3


async def test_an_event_that_never_ends_is_not_held_past_the_bound(
        relay_url: tuple[str, list[ProxyResult | Exception]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the bound, the answer's size is the client's 502: not retried on another
    worker, nor told as the worker breaking off (a long prompt's logprobs may be that large
    on every worker, and its failures ejected them)."""
    import router.proxy

    monkeypatch.setattr(router.proxy, "MAX_EVENT_BYTES", 1000)
    url, results = relay_url
    status, _, _ = await _get(url, "mode=endless")
    assert status == 599
    [result] = results
    assert isinstance(result, UpstreamAnswerError) and not isinstance(result, RetryableUpstream)
    assert "more than 1000 bytes" in str(result)


async def test_a_worker_silent_after_its_last_event_does_not_hold_the_client(
        relay_url: tuple[str, list[ProxyResult | Exception]]) -> None:
    """After [DONE] the router read on until the worker ended its body: a worker silent for
    the upstream timeout held a whole answer's client that long (the OpenAI SDK reads to
    the end). The answer ends with its last event; the body's end is awaited a moment."""
    url, results = relay_url
    started = time.monotonic()
    status, body, _ = await _get(url, "mode=done-then-hold-long&usage=1")
    assert time.monotonic() - started < 1.5               # not the worker's 3 s
    assert status == 200 and body.endswith(DONE) and body.count(DONE) == 1
    # (the relay then reads on a moment; the client having left, its handler is cancelled
    # with the whole answer's result: CancelledAfterTheEnd, counted as answered)
    assert not [r for r in results if not isinstance(r, ProxyResult)]


async def test_a_responses_stream_in_crlf_times_its_first_token() -> None:
    """The Responses API's first-token mark holds a line break, which a CRLF stream's raw
    chunk never matched: no time to first token, the stall watch never settled."""
    first: list[bool] = []
    proxy_result, _ = await _relay_once(
        b"event: response.created\r\ndata: {}\r\n\r\n"
        b"event: response.output_text.delta\r\ndata: {\"delta\": \"hi\"}\r\n\r\n"
        b"event: response.completed\r\ndata: {}\r\n\r\n",
        RESPONSES_STREAM, lambda: first.append(True))
    assert first == [True] and proxy_result.status == 200


async def _relay_once(stream: bytes, stream_format: StreamFormat,
                      on_first_byte: Callable[[], None]) -> tuple[ProxyResult, bytes]:
    """``stream`` sent by a worker in one write, relayed once in ``stream_format``: the
    result and what the client read."""
    async def worker(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(stream)
        return response

    upstream = TestServer(_make_app("/s", worker), host="127.0.0.1")
    await upstream.start_server()
    client = UpstreamClient(connect_timeout_s=1.0, read_timeout_s=2.0)
    proxy = Proxy(client, upstream_timeout_s=2.0)
    results: list[ProxyResult] = []

    async def relay(request: web.Request) -> web.StreamResponse:
        result = await proxy.forward(request, str(upstream.make_url("/s")), b"{}", {}, {},
                                     stream=True, wants_usage=True,
                                     on_first_byte=on_first_byte, stream_format=stream_format)
        results.append(result)
        return result.response

    front = TestServer(_make_app("/relay", relay), host="127.0.0.1")
    await front.start_server()
    try:
        _, body, _ = await _get(str(front.make_url("/relay")), "")
    finally:
        await client.close()
        await front.close()
        await upstream.close()
    return results[0], body


async def test_an_event_past_the_bound_after_the_start_is_no_failure_of_the_worker(
        relay_url: tuple[str, list[ProxyResult | Exception]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import router.proxy

    monkeypatch.setattr(router.proxy, "MAX_EVENT_BYTES", 1000)
    url, results = relay_url
    status, body, _ = await _get(url, "mode=big-after-start")
    assert status == 200 and b"more than 1000 bytes" in body
    [result] = results
    assert isinstance(result, ProxyResult) and result.status == 502
    assert not result.worker_failed           # not counted toward ejecting the worker


class _CollectingRelay(_StreamRelay):
    __slots__ = ("firsts", "written")

    def __init__(self, wants_usage: bool, stream_format: StreamFormat) -> None:
        super().__init__(None, {}, UsageRewrite(wants_usage, None),  # type: ignore[arg-type]
                         stream_format, on_first_token=(lambda: 1.0, self._first))
        self.written = b""
        self.firsts = 0

    def _first(self) -> None:
        self.firsts += 1

    async def _write(self, data: bytes) -> bool:
        self.written += data
        return True


async def _relayed(pieces: list[bytes], wants_usage: bool,
                   stream_format: StreamFormat = COMPLETION_STREAM) -> tuple[bytes, bool, int]:
    relay = _CollectingRelay(wants_usage, stream_format)
    for piece in pieces:
        await relay.feed(piece)
    return relay.written, relay.done, relay.events


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n"], ids=["LF", "CRLF"])
@pytest.mark.parametrize("wants_usage", [False, True], ids=["usage stripped", "usage kept"])
async def test_a_stream_cut_anywhere_is_relayed_as_whole(line_end: bytes,
                                                         wants_usage: bool) -> None:
    """Every cut of the worker's bytes in two, and one byte at a time, relays what the
    whole bytes do: the same events, the same end, the same count."""
    stream = (b"".join(CHUNK % i for i in range(3)) + FINISH + FP_USAGE + DONE).replace(
        b"\n", line_end)
    whole = await _relayed([stream], wants_usage)
    assert whole[1] and whole[2] == (6 if wants_usage else 5) and whole[0].endswith(DONE)
    for cut in range(1, len(stream)):
        assert await _relayed([stream[:cut], stream[cut:]], wants_usage) == whole, cut
    assert await _relayed([stream[i:i + 1] for i in range(len(stream))], wants_usage) == whole


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n"], ids=["LF", "CRLF"])
async def test_the_first_token_is_seen_once_wherever_the_bytes_are_cut(line_end: bytes) -> None:
    """The Responses API's first-token mark spans a line break: looked for in each raw chunk,
    it was missed when a cut fell inside it (or between a CR and its LF), and the time to
    first token came from a later delta or none. The token is seen when the event that
    carries it is whole (relayed)."""
    stream = (b"event: response.created\ndata: {}\n\n"
              b"event: response.output_text.delta\ndata: {\"delta\": \"hi\"}\n\n"
              b"event: response.completed\ndata: {}\n\n").replace(b"\n", line_end)
    delta_end = b"}" + line_end + line_end
    complete_at = stream.index(delta_end, stream.index(b".delta")) + len(delta_end)
    for cut in range(1, len(stream)):
        relay = _CollectingRelay(True, RESPONSES_STREAM)
        await relay.feed(stream[:cut])
        seen_early = relay.firsts
        await relay.feed(stream[cut:])
        assert relay.firsts == 1 and relay.first_byte_at == 1.0, cut
        assert seen_early == (1 if cut >= complete_at else 0), cut



@pytest.mark.parametrize("mode", ["error-mid", "error-mid-old", "error-mid-400"])
async def test_a_workers_error_event_is_relayed_and_ends_its_request_with_its_status(
        relay_url: tuple[str, list[ProxyResult | Exception]], mode: str) -> None:
    """vLLM tells of an engine's failure after the stream began in an error event, then
    ``[DONE]``: the request was counted as answered (200), its worker never failed. Relayed as
    it came (no error of the router's after it), it ends with the status the event names,
    a 5xx the worker's failure."""
    url, results = relay_url
    status, body, _ = await _get(url, f"mode={mode}")
    error = ERROR_EVENTS[mode][1]
    assert status == 200 and body == CHUNK % 0 + CHUNK % 1 + error + DONE
    [result] = results
    assert isinstance(result, ProxyResult) and result.usage is None
    assert result.status == {"error-mid": 500, "error-mid-old": 503, "error-mid-400": 400}[mode]
    assert result.worker_failed


async def test_a_workers_error_event_before_any_token_is_retried_elsewhere(
        relay_url: tuple[str, list[ProxyResult | Exception]]) -> None:
    """A 5xx error event as the stream's first: nothing reached the client, so another
    worker may serve the request, as after a 5xx answer."""
    url, results = relay_url
    status, _, _ = await _get(url, "mode=error-first")
    assert status == 599
    [failure] = results
    assert isinstance(failure, RetryableUpstream)
    assert (failure.reason, failure.status) == ("http_5xx", 500)
    assert "EngineCore encountered an issue." in failure.detail


async def test_a_4xx_error_event_before_any_token_is_the_clients_answer(
        relay_url: tuple[str, list[ProxyResult | Exception]]) -> None:
    url, results = relay_url
    status, body, _ = await _get(url, "mode=error-first-400")
    assert status == 200 and body == ERROR_EVENTS["error-first-400"][1] + DONE
    [result] = results
    assert isinstance(result, ProxyResult) and result.status == 400


@pytest.mark.parametrize("mode", ["usage-no-done", "done-no-blank", "done-no-blank-cr"])
async def test_a_whole_stream_whose_end_is_missing_is_whole(
        relay_url: tuple[str, list[ProxyResult | Exception]], mode: str) -> None:
    """A stream that ends with its usage chunk and no ``[DONE]`` (which the OpenAI SDK
    reads as whole), or whose ``[DONE]`` lacks its blank line, got an error event of the
    router's (and the worker a failure); it is the whole answer it is."""
    url, results = relay_url
    status, body, _ = await _get(url, f"mode={mode}")
    events = b"".join(CHUNK % i for i in range(3))
    assert status == 200 and body == (events if mode == "usage-no-done" else events + DONE)
    [result] = results
    assert isinstance(result, ProxyResult) and result.status == 200
    assert result.usage is not None and result.usage.completion_tokens == 3


@pytest.mark.parametrize("layout", sorted(OTHER_LAYOUTS))
async def test_sses_other_layouts_are_read_as_vllms(
        relay_url: tuple[str, list[ProxyResult | Exception]], layout: str) -> None:
    """Keep-alive comments, ``event:`` / ``id:`` fields, ``data:`` without its space, data
    over two lines, lines ending in CR: the usage chunk went unread (no tokens counted) and
    was relayed to a client that had not asked for it (the README's own loop then failed on
    its empty ``choices``), and the stream's end unseen. Each is read as vLLM's layout is."""
    url, results = relay_url
    status, body, headers = await _get(url, f"mode={layout}")
    assert status == 200 and headers["X-Accel-Buffering"] == "no"
    assert b'"usage"' not in body and b"upstream_error" not in body
    assert body.endswith(b"[DONE]\n\n") and body.count(b"[DONE]") == 1
    [result] = results
    assert isinstance(result, ProxyResult) and result.status == 200
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (7, 3)
    assert b'"finish_reason":"length"' in body      # (held for the usage chunk, then sent)


async def test_a_comment_is_no_first_token() -> None:
    """vLLM's keep-alives (``--sse-keep-alive-interval``) are comments: one before the first
    token was taken for it (time to first token, the stall watch settled)."""
    relay = _CollectingRelay(True, COMPLETION_STREAM)
    await relay.feed(b": keep-alive\n\n")
    await relay.feed(b": keep-alive\n\nretry: 100\n\n")
    assert relay.firsts == 0 and relay.first_byte_at is None
    await relay.feed(CHUNK % 0)
    assert relay.firsts == 1 and relay.written == (
        b": keep-alive\n\n: keep-alive\n\nretry: 100\n\n" + CHUNK % 0)


async def test_an_error_event_is_no_first_token() -> None:
    relay = _CollectingRelay(True, COMPLETION_STREAM)
    await relay.feed(ERROR_EVENTS["error-first-400"][1])
    assert relay.firsts == 0 and relay.worker_error == 400


async def test_a_partial_first_event_is_no_first_token() -> None:
    """The time to first token was taken when the first bytes of an event came: a worker
    that sent half an event and closed had its request retried elsewhere, and counted in
    the clients' time to first token twice."""
    relay = _CollectingRelay(True, COMPLETION_STREAM)
    await relay.feed((CHUNK % 0)[:20])
    assert relay.firsts == 0
    await relay.feed((CHUNK % 0)[20:])
    assert relay.firsts == 1


@pytest.mark.parametrize("api", ["messages", "responses"])
async def test_a_named_error_event_ends_the_stream_once(api: str) -> None:
    """The Responses and Messages APIs end a failed stream with an ``event: error`` (vLLM's
    Messages API follows it with a ``[DONE]``): the router read on and, the stream
    unfinished, added an error event of its own (two errors, a 502)."""
    if api == "messages":
        stream = (b'event: message_start\ndata: {"type":"message_start"}\n\n'
                  b'event: content_block_delta\ndata: {"type":"content_block_delta"}\n\n'
                  b'event: error\ndata: {"type":"error","error":{"type":"InternalServerError",'
                  b'"message":"EngineCore encountered an issue."}}\n\ndata: [DONE]\n\n')
        stream_format = MESSAGES_STREAM
    else:
        stream = (b'event: response.created\ndata: {"type":"response.created"}\n\n'
                  b'event: response.output_text.delta\ndata: {"delta":"hi"}\n\n'
                  b'event: error\ndata: {"type":"error","code":"server_error",'
                  b'"message":"boom","param":null,"sequence_number":2}\n\n')
        stream_format = RESPONSES_STREAM
    result, body = await _relay_once(stream, stream_format, lambda: None)
    assert body == stream and body.count(b"event: error") == 1
    assert result.status == 500 and result.worker_failed


async def test_a_workers_redirect_is_not_relayed(
        relay_url: tuple[str, list[ProxyResult | Exception]]) -> None:
    """A worker's 307 reached the client as it came: its ``Location`` sent the client around
    the router, to an internal address, and the worker's misconfiguration counted as an
    answer. It is the worker's failure, retried elsewhere, the client told no address."""
    url, results = relay_url
    status, _, _ = await _get(url, "mode=redirect")
    assert status == 599
    [failure] = results
    assert isinstance(failure, RetryableUpstream)
    assert (failure.reason, failure.status) == ("redirect", 502)
    assert "307 to http://10.1.2.3:8000" in str(failure)             # (the log's)
    assert "10.1.2.3" not in failure.client_text()


class _DrainingTransport(asyncio.WriteTransport):
    """A transport whose write buffer the test empties (the client taking bytes)."""

    def __init__(self) -> None:
        super().__init__()
        self.buffered = 100_000

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def is_closing(self) -> bool:
        return False


class _TakingAt(_DrainingTransport):
    """A client that takes half the buffer at loop time ``at``."""

    def __init__(self, at: float) -> None:
        super().__init__()
        self.at = at

    def get_write_buffer_size(self) -> int:
        return 50_000 if asyncio.get_running_loop().time() >= self.at else self.buffered


async def test_a_client_taking_bytes_late_in_the_timeout_keeps_its_write() -> None:
    """The watch moved the write's own deadline from a timer: a client that took bytes in
    the last quarter of the timeout made it move an expiring deadline (a RuntimeError in a
    loop callback, the client cut while it read). The watch alone ends the write now."""
    from router.proxy import _ClientProgress

    loop = asyncio.get_running_loop()
    errors: list[object] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    timeout = 0.2
    try:
        for _ in range(5):
            # the client takes bytes at 0.78 of the timeout, read by whichever check comes
            # next, however late it runs (a timer taking them raced the checks: the one due
            # at 0.75 run past 1.0 on a loaded machine ended the write first)
            transport = _TakingAt(loop.time() + 0.78 * timeout)
            async with asyncio.timeout(None) as deadline:      # a write it keeps alive
                progress = _ClientProgress(transport, deadline, timeout)
                try:
                    await asyncio.sleep(1.5 * timeout)
                finally:
                    progress.stop()
        started = loop.time()
        with pytest.raises(TimeoutError):                      # silent: ended at its timeout
            async with asyncio.timeout(None) as deadline:
                progress = _ClientProgress(_DrainingTransport(), deadline, timeout)
                try:
                    await asyncio.sleep(5 * timeout)
                finally:
                    progress.stop()
        assert timeout <= loop.time() - started < 2 * timeout
    finally:
        loop.set_exception_handler(None)
    assert errors == []
