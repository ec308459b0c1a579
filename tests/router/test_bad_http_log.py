"""Requests the HTTP parser refuses are answered 400 and logged as one warning line."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest
from aiohttp.http_exceptions import InvalidHeader, LineTooLong

from router.bad_http_log import SERVER_LOGGER, OneLineBadHttp
from tests.router.gateway_support import RouterFactory, subset
from workers.fleet import FleetConfig


def _record(error: BaseException | None, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(SERVER_LOGGER, level, __file__, 1, "Error handling request from %s",
                             ("127.0.0.1",), (type(error), error, None) if error else None)


def test_a_client_error_becomes_one_warning_line_and_a_server_error_stays() -> None:
    one_line = OneLineBadHttp()
    refused = _record(LineTooLong(b"x" * 5000, 8190))
    assert one_line.filter(refused)
    assert (refused.levelno, refused.levelname, refused.exc_info) == (
        logging.WARNING, "WARNING", None)
    message = refused.getMessage()
    assert message.startswith("Error handling request from 127.0.0.1 (answered 400): "
                              "a line of the request's head over 8190 bytes (not shown")
    assert message.endswith("[1 such request(s) so far; one line for the first, then one "
                            "in 1000]")
    assert "\n" not in message and len(message) < 400
    broken = _record(RuntimeError("a bug of the server"))
    assert one_line.filter(broken)
    assert broken.levelno == logging.ERROR and broken.exc_info is not None
    plain = _record(None, logging.INFO)
    assert one_line.filter(plain) and plain.levelno == logging.INFO


def test_client_errors_are_logged_the_first_then_one_in_a_thousand() -> None:
    """A client sending 87 broken requests wrote 69 warning lines in 0.1 s."""
    one_line = OneLineBadHttp()
    kept = [n for n in range(1, 2501) if one_line.filter(_record(LineTooLong(b"x", 8190)))]
    assert kept == [1, 1000, 2000]
    assert one_line.filter(_record(RuntimeError("a bug of the server")))   # never throttled


@pytest.mark.integration
async def test_a_refused_header_line_never_shows_a_key(
        make_router: RouterFactory, emulated_fleet: FleetConfig,
        caplog: pytest.LogCaptureFixture) -> None:
    """The parser quotes the header line it refuses: `Authorization: Bearer sk-…` with a
    stray control character put the key in the log."""
    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    caplog.set_level(logging.DEBUG)
    for header in (b"Authorization: Bearer sk-SECRET-'9\"8]7\x01",
                   b"x-api-key: sk-SECRET-42\x01"):
        reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
        try:
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + header +
                         b"\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
            status_line = await asyncio.wait_for(reader.readline(), 10)
        finally:
            writer.close()
        assert status_line.split(b" ")[1] == b"400"
    logged = [r.getMessage() for r in caplog.records if r.name == SERVER_LOGGER]
    assert logged and not [m for m in logged if "SECRET" in m]
    assert "<not shown>" in logged[0]


@pytest.mark.integration
async def test_a_header_over_the_limit_is_refused_in_one_line_and_the_router_serves_on(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    caplog.set_level(logging.DEBUG, logger=SERVER_LOGGER)
    reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
    try:
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Tenant: " + b"a" * 10_000
                     + b"\r\n\r\n")
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
    finally:
        writer.close()
    assert status_line.split(b" ")[1] == b"400"
    records = [r for r in caplog.records if r.name == SERVER_LOGGER]
    assert [(r.levelname, r.exc_info) for r in records] == [("WARNING", None)]
    assert "over 8190 bytes" in records[0].getMessage()
    async with aiohttp.ClientSession() as session, \
            session.get(router.url + "/health") as resp:
        assert resp.status == 200


@pytest.mark.integration
@pytest.mark.parametrize(("path", "body_of"), [
    ("/v1/chat/completions", lambda error: error["error"]["message"]),
    ("/v1/messages", lambda error: error["error"]["message"]),
    ("/tokenize", lambda error: error["error"]["message"]),
])
async def test_a_compressed_body_is_refused_unread_in_the_api_s_shape(
        path: str, body_of: Any, emulated_fleet: FleetConfig, make_router: RouterFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    """A compressed body is refused (415) in its API's error shape, not inflated (vLLM's
    server does not decode one either), whether it is gzip or not; no traceback."""
    import gzip

    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    caplog.set_level(logging.DEBUG)
    body = b'{"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}'
    async with aiohttp.ClientSession() as session:
        for data, encoding in ((body, "gzip"), (gzip.compress(body), "gzip"),
                               (body, "br")):
            async with session.post(router.url + path, data=data, headers={
                    "Content-Type": "application/json", "Content-Encoding": encoding,
                    "x-request-id": "enc-1"}) as resp:
                assert resp.status == 415
                assert resp.headers["x-kvroute-reason"] == (
                    "rejected before routing: unsupported_content_encoding")
                error = await resp.json()
            assert body_of(error) == (f"Compressed request bodies are not accepted "
                                      f"(Content-Encoding: {encoding}): send the body "
                                      "uncompressed.")
            if path == "/v1/messages":
                assert error["type"] == "error"
            assert resp.headers["x-request-id"] == "enc-1"
        async with session.get(router.url + "/health") as health:
            assert health.status == 200
    # the server's records (another test's leftover client may log as it is collected)
    ours = [r for r in caplog.records if r.name.split(".")[0] in ("aiohttp", "router")]
    assert not [r for r in ours if r.exc_info or r.levelno >= logging.ERROR]


@pytest.mark.integration
async def test_a_compression_bomb_does_not_stall_the_router(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A 2 MB gzip body sent to /health (answered without reading it) was inflated to 2 GiB
    on the event loop as aiohttp drained it: seconds of stall, every worker's scrape timed
    out and all were marked down. Nothing inflates it now."""
    import time
    import zlib

    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"a" * (1 << 20)
    bomb = b"".join([squeeze.compress(block) for _ in range(512)] + [squeeze.flush()])
    async with aiohttp.ClientSession() as session:
        sent = asyncio.gather(*(session.get(router.url + "/health", data=bomb, headers={
            "Content-Encoding": "gzip"}) for _ in range(4)))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        for _ in range(10):
            async with session.get(router.url + "/health") as health:
                assert health.status == 200
        slowest = time.monotonic() - started
        for resp in await sent:
            resp.release()
    assert slowest < 2.0          # ten answers; a bomb inflated on the loop took seconds each


@pytest.mark.integration
async def test_a_key_too_long_for_a_header_line_is_not_logged(
        make_router: RouterFactory, emulated_fleet: FleetConfig,
        caplog: pytest.LogCaptureFixture) -> None:
    """The parser quotes the start of a line over the limit, a header's value without its
    name: `b'Bearer sk-…'` was logged."""
    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    caplog.set_level(logging.DEBUG, logger=SERVER_LOGGER)
    for header in (b"Authorization: Bearer sk-SECRET" + b"a" * 9000,
                   b"x-api-key: sk-SECRET" + b"b" * 9000):
        reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
        try:
            writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n\r\n")
            await writer.drain()
            status_line = await asyncio.wait_for(reader.readline(), 10)
        finally:
            writer.close()
        assert status_line.split(b" ")[1] == b"400"
    logged = [r.getMessage() for r in caplog.records if r.name == SERVER_LOGGER]
    assert logged and not [m for m in logged if "SECRET" in m], logged


def test_a_key_is_not_shown_whatever_it_holds_or_where_the_bad_byte_is() -> None:
    for line in (b"Authorization: Bearer sk-SEC'RET]\"x\x01",
                 b"Authorization\x01: Bearer sk-SECRET",
                 b"X-Api-Key: sk-SECRET\r", b"Cookie: session=SECRET\x7f"):
        record = _record(InvalidHeader(line))
        assert OneLineBadHttp().filter(record)      # (each the first of its filter)
        assert "SECRET" not in record.getMessage()
