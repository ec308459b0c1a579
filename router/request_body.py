"""Reading a request's body while it keeps arriving: ``Settings.body_timeout_s`` of silence
ends it. A compressed body is refused unread (415): the server never inflates one
(``auto_decompress=False``), as vLLM's does not; a 2 MB gzip body inflated to 2 GiB on the
event loop, even after the answer to a request that never read it.

aiohttp waits for a body as long as its connection stays open: a client that sends its
headers and part of its body, then nothing, held the connection (and, on SIGTERM, the drain)
until it closed it. The body is read as aiohttp reads it, and while it is incomplete the
bytes received are checked every ``body_timeout_s``: when none came in that time the request
is answered 408 in the API's shape. A slow upload that keeps sending is not cut. A body
already received whole (most are, with their headers) is read at once.

A client that asks ``Expect: 100-continue`` (curl does for bodies over 1 MiB) waits for the
server's ``100 Continue`` before sending its body. aiohttp sends it as soon as the request
arrives, before any middleware: a client without a valid key, or with a body over the limit,
uploaded all of it to be refused. The routes take ``expect_later`` instead, and the
``100 Continue`` is sent here, when the body is read: after the key was checked, and not for
a ``Content-Length`` over the limit (413 at once).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from router.errors import RequestTimeout, RequestTooLarge, UnsupportedEncoding

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


async def expect_later(request: web.Request) -> None:
    """A route's ``expect_handler``: ``100-continue`` is answered by ``read_body``, once the
    request is known to be wanted; any other expectation is refused (417) as aiohttp does."""
    expect = request.headers.get("Expect", "")
    if request.version >= (1, 1) and expect.lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expect[:100]}")


async def read_body(request: web.Request, timeout_s: float, max_bytes: int) -> bytes:
    """The whole body, or ``RequestTimeout`` when none of it arrives for ``timeout_s``, or
    ``RequestTooLarge`` past ``max_bytes`` (the app's ``client_max_size``; aiohttp's own 413
    went past the director: no request id echoed, not counted)."""
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        named = f" (Content-Encoding: {encoding[:40]})" if encoding.isprintable() else ""
        raise UnsupportedEncoding(f"Compressed request bodies are not accepted{named}: send "
                                  "the body uncompressed.")
    length = request.content_length      # declared too large: refused before it is sent
    if length is not None and length > max_bytes:
        raise RequestTooLarge(f"Request body too large: Maximum request body size {max_bytes} "
                              f"exceeded, actual body size {length}")
    if request.headers.get("Expect", "").lower() == "100-continue":
        await _continue(request)
    try:
        return await _read_body(request, timeout_s)
    except web.HTTPRequestEntityTooLarge as exc:
        raise RequestTooLarge(f"Request body too large: {exc.text or 'limit exceeded'}"
                              ) from None


async def _continue(request: web.Request) -> None:
    """Tell a client waiting for it to send its body."""
    content = request.content
    if request.version >= (1, 1) and not content.is_eof() and content.total_bytes == 0:
        await request.writer.write(_CONTINUE)
        request.writer.output_size = 0      # as aiohttp's: the answer has not begun


async def _read_body(request: web.Request, timeout_s: float) -> bytes:
    """``request.read()`` in this task, cut when ``timeout_s`` passes with none of the body
    arriving (checked every ``timeout_s``). No task of its own: a cancelled reading task held
    its exception, whose traceback held the partial body, in a cycle only a full collection
    freed (40 clients that sent 30 MB each and left kept 1.2 GB)."""
    content = request.content
    if content.is_eof():
        return await request.read()
    loop = asyncio.get_running_loop()
    received = content.total_bytes
    ticker: asyncio.TimerHandle | None = None
    try:
        async with asyncio.timeout(None) as deadline:

            def look() -> None:
                nonlocal received, ticker
                if content.total_bytes == received:
                    deadline.reschedule(loop.time())      # the read ends: TimeoutError
                else:
                    received = content.total_bytes
                    ticker = loop.call_later(timeout_s, look)

            ticker = loop.call_later(timeout_s, look)
            return await request.read()
    except TimeoutError:
        raise RequestTimeout(f"Request body not received: nothing of it came for "
                             f"{timeout_s:g} s.") from None
    finally:
        if ticker is not None:
            ticker.cancel()
