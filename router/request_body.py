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
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from router.errors import RequestTimeout, RequestTooLarge, UnsupportedEncoding


async def read_body(request: web.Request, timeout_s: float) -> bytes:
    """The whole body, or ``RequestTimeout`` when none of it arrives for ``timeout_s``, or
    ``RequestTooLarge`` past the app's ``client_max_size`` (aiohttp's own 413 went past the
    director: no request id echoed, not counted)."""
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        named = f" (Content-Encoding: {encoding[:40]})" if encoding.isprintable() else ""
        raise UnsupportedEncoding(f"Compressed request bodies are not accepted{named}: send "
                                  "the body uncompressed.")
    try:
        return await _read_body(request, timeout_s)
    except web.HTTPRequestEntityTooLarge as exc:
        raise RequestTooLarge(f"Request body too large: {exc.text or 'limit exceeded'}"
                              ) from None


async def _read_body(request: web.Request, timeout_s: float) -> bytes:
    content = request.content
    if content.is_eof():
        return await request.read()
    reading = asyncio.ensure_future(request.read())
    done: set[asyncio.Future[bytes]] = set()
    received = content.total_bytes
    try:
        while True:
            done, _ = await asyncio.wait((reading,), timeout=timeout_s)
            if done:
                return reading.result()
            if content.total_bytes == received:
                raise RequestTimeout(f"Request body not received: nothing of it came for "
                                     f"{timeout_s:g} s.")
            received = content.total_bytes
    finally:
        if not reading.done():
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
        elif not reading.cancelled():
            # retrieved, so that a read that failed as this request was cancelled (its client
            # gone mid-body) is not logged as a task exception never retrieved, a traceback
            reading.exception()
        # the task holds its exception, whose traceback holds this frame: a cycle that kept
        # each refused body (33 MB for a 413) alive until a full collection
        del reading, done
