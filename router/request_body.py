"""Reading a request's body within ``Settings.body_timeout_s``.

aiohttp waits for a body as long as its connection stays open: a client that sends its
headers and part of its body, then nothing, held the connection (and, on SIGTERM, the drain)
until it closed. Past the limit the request is answered 408 in the API's shape.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from router.errors import RequestTimeout


async def read_body(request: web.Request, timeout_s: float) -> bytes:
    """The whole body, or ``RequestTimeout`` when it is not all there within ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            return await request.read()
    except TimeoutError:
        raise RequestTimeout(f"Request body not received within {timeout_s:g} s.") from None
