"""Cross-origin requests from browsers, answered as vLLM's OpenAI server answers them.

vLLM's API server lets a web page of any origin call it (``--allowed-origins``, default
``["*"]``, through Starlette's ``CORSMiddleware``): a browser's preflight (``OPTIONS`` with
``Origin`` and ``Access-Control-Request-Method``) gets a 200 naming what is allowed, and
every answer to a request with an allowed ``Origin`` carries
``Access-Control-Allow-Origin``. ``Cors(origins)`` does the same in front of the whole
router (outside the API-key check: a preflight carries no key), and exposes the router's own
headers (``x-kvroute-*``, the request id) to the page's script. With no origins the router
does not install it: no header is added and ``OPTIONS`` is a 405.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web
from aiohttp.typedefs import Handler

ALLOWED_METHODS = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
MAX_AGE_S = 600
EXPOSED_HEADERS = ("x-kvroute-worker", "x-kvroute-profile", "x-kvroute-reason",
                   "x-kvroute-rule", "x-kvroute-class", "x-request-id", "request-id", "retry-after",
                   *(f"x-ratelimit-{what}-{unit}" for unit in ("requests", "tokens")
                     for what in ("limit", "remaining", "reset")))


class Cors:
    """Preflights answered (``middleware``, outermost) and the allowing headers set on every
    answer as it is prepared (``on_response_prepare``: streams too) for ``origins``
    (``"*"``: any)."""

    def __init__(self, origins: Sequence[str], request_id_header: str = "x-request-id") -> None:
        self._any = "*" in origins
        self._allowed = frozenset(origins)
        self._exposed = ", ".join(dict.fromkeys((*EXPOSED_HEADERS, request_id_header.lower())))

    def allowed_origin(self, origin: str) -> str | None:
        """The ``Access-Control-Allow-Origin`` value for ``origin``, None if refused."""
        if self._any:
            return "*"
        return origin if origin in self._allowed else None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if (origin is not None and request.method == "OPTIONS"
                and "Access-Control-Request-Method" in request.headers):
            return self._preflight(request, self.allowed_origin(origin))
        return await handler(request)

    async def on_response_prepare(self, request: web.Request,
                                  response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if origin is None:
            return
        value = self.allowed_origin(origin)
        if value is None:
            return
        response.headers["Access-Control-Allow-Origin"] = value
        response.headers["Access-Control-Expose-Headers"] = self._exposed
        if not self._any:
            response.headers.add("Vary", "Origin")

    def _preflight(self, request: web.Request, origin: str | None) -> web.Response:
        if origin is None:
            return web.Response(status=400, text="Disallowed CORS origin")
        headers = {"Access-Control-Allow-Origin": origin,
                   "Access-Control-Allow-Methods": ALLOWED_METHODS,
                   "Access-Control-Max-Age": str(MAX_AGE_S)}
        requested = request.headers.get("Access-Control-Request-Headers")
        if requested:
            headers["Access-Control-Allow-Headers"] = requested
        if not self._any:
            headers["Vary"] = "Origin"
        return web.Response(status=200, text="OK", headers=headers)
