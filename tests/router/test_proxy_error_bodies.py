"""A worker's error body of megabytes: read in part, and looked at in part, off the loop's
time (an 8 MiB 500 page held the router's event loop ~1 s a request)."""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web

from router.proxy import MAX_ERROR_BODY_BYTES, RetryableUpstream, _read_at_most, one_line
from workers.upstream import UpstreamClient


def _naive(text: str, limit: int) -> str:
    printable = "".join(char if char.isprintable() else " " for char in text)
    return " ".join(printable.split())[:limit]


def test_one_line_matches_the_whole_text_reading() -> None:
    for text in ("a  b\n c\x00d" * 500, " " * 5000 + "x y", "word " * 3000, "", "\n\n",
                 "é\tü " * 2000, "x" * 10_000):
        for limit in (10, 300, 2000):
            assert one_line(text, limit) == _naive(text, limit)


class _Sliced(str):
    """A text that records the longest head sliced from it."""

    longest = 0

    def __getitem__(self, key: object) -> str:
        if isinstance(key, slice) and key.stop is not None:
            _Sliced.longest = max(_Sliced.longest, key.stop)
        return str.__getitem__(self, key)  # type: ignore[index]


def test_one_line_of_megabytes_looks_at_its_head_alone() -> None:
    """An 8 MiB error page was folded character by character, whole, on the event loop."""
    page = _Sliced(("<p>Internal error " + "x" * 80 + "</p>\n") * 80_000)     # ~8 MiB
    _Sliced.longest = 0
    failure = RetryableUpstream.answered(500, page, None)
    assert 0 < _Sliced.longest <= 8 * 2000
    assert failure.detail.startswith("HTTP 500: <p>Internal error xxx")


def test_long_worker_message_reaches_the_client_and_busy_is_read() -> None:
    message = "The prompt failed validation: " + "field x is wrong; " * 150
    body = orjson.dumps({"error": {"message": message, "type": "InternalServerError",
                                   "param": None, "code": 500}}).decode()
    failure = RetryableUpstream.answered(500, body, None)
    assert "The prompt failed validation" in failure.client_text()
    busy = orjson.dumps({"error": {"message": "The engine is currently busy " + "q" * 3000,
                                   "type": "ServiceUnavailableError", "code": 503}}).decode()
    assert RetryableUpstream.answered(503, busy, None).busy


async def test_read_at_most_stops_early() -> None:
    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=500)
        await response.prepare(request)
        for _ in range(200):                 # 200 MiB if read whole
            await response.write(b" " * (1 << 20))
        return response

    app = web.Application()
    app.router.add_post("/x", endless)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]          # type: ignore[union-attr]
    client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=5.0)
    try:
        upstream = await client.request("POST", f"http://127.0.0.1:{port}/x", b"{}", {})
        data = await asyncio.wait_for(_read_at_most(upstream, MAX_ERROR_BODY_BYTES), 5)
        upstream.close()
        assert len(data) == MAX_ERROR_BODY_BYTES
    finally:
        await client.close()
        await runner.cleanup()
