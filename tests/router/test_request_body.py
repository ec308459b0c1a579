"""A body that stops arriving mid-way is answered 408 after ``body_timeout_s`` of silence, on
the routed and the utility endpoints; one that keeps arriving slowly is read whole."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.router.gateway_support import RouterFactory, url_fleet

pytestmark = pytest.mark.integration


async def _stalled_upload(port: int, path: str) -> tuple[str, dict[str, object]]:
    """Headers announcing 1,000 bytes, then 9 of them and silence: the status line and body
    of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     "application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":".encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        body = await asyncio.wait_for(reader.readexactly(length), timeout=10)
    finally:
        writer.close()
    return head.split(b"\r\n")[0].decode(), json.loads(body)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
async def test_a_stalled_upload_is_answered_408(make_router: RouterFactory, path: str) -> None:
    router = await make_router(url_fleet({"w0": "http://127.0.0.1:9"}), body_timeout_s=0.5)
    started = asyncio.get_running_loop().time()
    status, body = await _stalled_upload(router.port, path)
    assert status == "HTTP/1.1 408 Request Timeout"
    assert body["error"] == {"message": "Request body not received: nothing of it came for "
                                        "0.5 s.",
                             "type": "invalid_request_error", "param": None,
                             "code": "request_timeout"}
    assert asyncio.get_running_loop().time() - started < 5


async def test_a_slow_upload_that_keeps_sending_is_not_cut(make_router: RouterFactory) -> None:
    """The limit is on silence, not on the whole body: 2 s of trickle with a 0.5 s limit."""
    router = await make_router(url_fleet({"w0": "http://127.0.0.1:9"}), body_timeout_s=0.5)
    body = b'{"prompt": "' + b"x" * 20 + b'"}'
    reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
    try:
        writer.write(b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     b"application/json\r\nContent-Length: " + str(len(body)).encode()
                     + b"\r\n\r\n")
        for i in range(0, len(body), 4):             # 4 bytes every 0.2 s: ~2 s in all
            writer.write(body[i:i + 4])
            await writer.drain()
            await asyncio.sleep(0.2)
        status = (await asyncio.wait_for(reader.readline(), timeout=10)).decode()
    finally:
        writer.close()
    # the body arrived whole and was handled: no worker answers at port 9, so not a 408
    assert status.startswith("HTTP/1.1 ") and " 408 " not in status, status


def test_the_limit_must_be_positive_and_finite() -> None:
    from pathlib import Path

    from router.settings import Settings
    for bad, message in ((0.0, "body_timeout_s: must be positive"),
                         (float("nan"), "body_timeout_s: must be a finite number of seconds")):
        with pytest.raises(ValueError, match=message):
            Settings(fleet_path=Path("f"), routing_path=Path("r"), body_timeout_s=bad)


async def test_a_refused_body_is_freed_at_once(make_router: RouterFactory) -> None:
    """A 413's reading task held its exception, whose traceback held the frame holding the
    task: each refused body (33 MB) stayed alive until a full collection, and memory climbed
    by that much per request (1 GB after 30)."""
    import gc

    from aiohttp import web

    router = await make_router(url_fleet({"w0": "http://127.0.0.1:9"}),
                               max_body_bytes=1 << 20)

    async def dribbled(chunks: int) -> None:       # arrives in pieces: read by a task
        reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
        try:
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(chunks):
                writer.write(b"10000\r\n" + b"a" * 0x10000 + b"\r\n")
                await writer.drain()
                await asyncio.sleep(0.01)
            writer.write(b"0\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout=10)
            assert b" 413 " in head
        finally:
            writer.close()

    gc.collect()
    gc.disable()
    try:
        await dribbled(20)
        await asyncio.sleep(0.1)
        alive = [o for o in gc.get_objects() if type(o) is web.HTTPRequestEntityTooLarge]
    finally:
        gc.enable()
    assert alive == []


async def test_a_client_gone_mid_body_is_freed_at_once(make_router: RouterFactory) -> None:
    """A cancelled reading task held its exception, whose traceback held the partial body
    and the request, until a full collection: 40 clients that sent 30 MB each and left kept
    1.2 GB, and three rounds of it 3.7 GB, the router idle."""
    import gc

    from aiohttp import web

    router = await make_router(url_fleet({"w0": "http://127.0.0.1:9"}))

    def requests_alive() -> int:
        return sum(1 for o in gc.get_objects() if isinstance(o, web.BaseRequest))

    gc.collect()
    gc.disable()
    try:
        before = requests_alive()
        for _ in range(3):
            _reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 4000000\r\n\r\n"
                         + b" " * 2_000_000)      # half the body, then gone
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.close()
        for _ in range(100):                     # the handlers see the clients gone
            await asyncio.sleep(0.05)
            if requests_alive() <= before:
                break
        alive = requests_alive() - before
    finally:
        gc.enable()
    assert alive <= 0


async def test_a_client_gone_mid_body_leaves_no_traceback(
        make_router: RouterFactory, caplog: pytest.LogCaptureFixture) -> None:
    """Each client that closed mid-body left an ERROR 'Task exception was never retrieved'
    with a ConnectionResetError traceback: anyone could fill the log with them."""
    import gc
    import logging

    router = await make_router(url_fleet({"w0": "http://127.0.0.1:9"}))
    caplog.set_level(logging.DEBUG)
    for _ in range(10):
        _reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()
    await asyncio.sleep(0.2)
    gc.collect()
    await asyncio.sleep(0.05)
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


async def test_an_idle_client_connection_is_closed(make_router: RouterFactory) -> None:
    """Idle connections were kept an hour (aiohttp's default), piling up toward the
    open-file limit; a request answered, the connection goes after the idle timeout."""
    router = await make_router(url_fleet({"w0": "http://127.0.0.1:9"}),
                               client_idle_timeout_s=0.5)
    reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
    try:
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        assert head.startswith(b"HTTP/1.1 ")            # (503: its one worker is down)
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        await reader.readexactly(length)
        assert await asyncio.wait_for(reader.read(), timeout=5) == b""     # closed by it
    finally:
        writer.close()


async def _expecting(port: int, headers: bytes, expect: bytes = b"100-continue"
                     ) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    """Send a request's headers with ``Expect: <expect>`` and no body; the first status line
    answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nExpect: " + expect + b"\r\n" + headers + b"\r\n")
    await writer.drain()
    return await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout=5), reader, writer


async def test_100_continue_comes_after_the_key_and_size_checks(
        make_router: RouterFactory, emulated_fleet: object) -> None:
    """aiohttp answered 100 Continue as soon as the headers came, before any check: a client
    without a key, or declaring a body over the limit, uploaded it all to be refused. Now
    those are refused at once, and a wanted request is told to go on as its body is read."""
    from tests.router.gateway_support import MODEL, subset
    from workers.fleet import FleetConfig

    assert isinstance(emulated_fleet, FleetConfig)
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), api_keys=("sk-ok",),
                               max_body_bytes=1 << 20)
    body = json.dumps({"model": MODEL, "max_tokens": 2,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    length = b"Content-Length: %d\r\n" % len(body)
    no_key, _, writer = await _expecting(router.port, length)
    writer.close()
    assert b" 401 " in no_key
    too_large, _, writer = await _expecting(
        router.port, b"Authorization: Bearer sk-ok\r\nContent-Length: %d\r\n" % (2 << 20))
    writer.close()
    assert b" 413 " in too_large
    go_on, reader, writer = await _expecting(router.port,
                                             b"Authorization: Bearer sk-ok\r\n" + length)
    try:
        assert go_on == b"HTTP/1.1 100 Continue\r\n"
        assert await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout=5) == b"\r\n"
        writer.write(body)
        status = await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout=10)
        assert b" 200 " in status
    finally:
        writer.close()
    unknown, _, writer = await _expecting(router.port, length, b"something-else")
    writer.close()
    assert b" 417 " in unknown


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
async def test_a_body_declared_over_the_limit_is_refused_before_it_comes(
        make_router: RouterFactory, path: str) -> None:
    """Without ``Expect: 100-continue``, a ``Content-Length`` of a terabyte followed by a byte
    now and then was read until ``body_timeout_s`` of silence: a 408 a minute later, or never
    while the bytes kept coming. It is answered 413 at once."""
    router = await make_router(url_fleet({"w0": "http://127.0.0.1:9"}), max_body_bytes=1 << 20)
    reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
    try:
        writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     "application/json\r\nContent-Length: 999999999999\r\n\r\n{".encode())
        await writer.drain()
        status = await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout=10)
    finally:
        writer.close()
    assert status == b"HTTP/1.1 413 Request Entity Too Large\r\n"
