"""Clients' API keys: with ``Settings.api_keys``, only clients holding one are served.

As vLLM's ``--api-key``: a request whose path is guarded must carry one of the keys, as
``Authorization: Bearer <key>`` (OpenAI clients) or ``x-api-key: <key>`` (Anthropic
clients); otherwise it is answered 401 (``router.errors.Unauthorized``) before its body is
read, and counted in ``kvroute_requests_total{status="401"}``. Guarded: the OpenAI and
Anthropic APIs (``/v1/…``), ``/tokenize`` and ``/detokenize`` (they spend worker time), and
``/debug/…`` (what the router knows of traffic and workers). Open: ``/health`` and
``/metrics``, for load balancers and Prometheus. Keys are compared as SHA-256 digests in
constant time; no key is ever logged or echoed.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware

from router.errors import Unauthorized

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

GUARDED_PREFIXES = ("/v1/", "/tokenize", "/detokenize", "/debug/")
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def _digest(key: str) -> bytes:
    # a header's bytes that are not UTF-8 were kept by aiohttp as escapes
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


def presented_key(request: web.Request) -> str | None:
    """The key a request carries: the bearer token, else ``x-api-key``."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key") or None


class ClientKeys:
    """The router's accepted keys, as digests."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys or not all(keys):
            raise ValueError("api_keys: every key must be a non-empty string")
        self._digests = tuple(_digest(key) for key in keys)

    def accepts(self, key: str) -> bool:
        digest = _digest(key)
        matched = False
        for known in self._digests:       # every key compared, whichever matches
            matched |= secrets.compare_digest(digest, known)
        return matched


def guarded(path: str) -> bool:
    return path.startswith(GUARDED_PREFIXES) or path in ("/v1", "/debug")


def client_auth_middleware(keys: ClientKeys,
                           on_refused: Callable[[], None]) -> Middleware:
    """The middleware refusing guarded requests without an accepted key (placed inside
    ``router.errors.error_middleware``, which renders the 401 in the path's error shape)."""

    @web.middleware
    async def client_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "OPTIONS" or not guarded(request.path):
            return await handler(request)
        key = presented_key(request)
        if key is None:
            on_refused()
            raise Unauthorized("You didn't provide an API key. Send it as "
                               "`Authorization: Bearer <key>` (or `x-api-key: <key>`).",
                               headers=_CHALLENGE)
        if not keys.accepts(key):
            on_refused()
            raise Unauthorized("Incorrect API key provided.", headers=_CHALLENGE)
        return await handler(request)

    return client_auth
