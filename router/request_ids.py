"""Request ids: the client's own (``x-request-id``) or generated, unique among the requests
in flight at this router.

The id keys the policies' per-request state (in-flight prefixes, the decode guard's
incumbents, the latency predictions awaiting their outcome) and travels to the worker as
``X-Request-Id``, which vLLM uses as its own request id and refuses while a request with the
same id is running. Clients may send the same id twice at once (a retry that does not wait,
a fixed id in a script): the second gets the first's id with a suffix, which the response's
``x-request-id`` then reports. An id that is not printable ASCII (it is echoed in a
response header, which carries visible ASCII: ``router.header_values``), or longer than 256
characters, is replaced by a new one.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Awaitable, Callable
from typing import TypeGuard

from aiohttp import web

# the longest id taken from a client: it is echoed, logged, kept with each decision and sent on
MAX_REQUEST_ID_CHARS = 256


def usable(given: str | None) -> TypeGuard[str]:
    """Whether a client's request id is taken (else one is generated): printable ASCII
    (no control characters, no bytes outside ASCII, which a header echoing it would carry
    raw) of at most ``MAX_REQUEST_ID_CHARS``."""
    return (given is not None and 0 < len(given) <= MAX_REQUEST_ID_CHARS
            and given.isascii() and given.isprintable())


class RequestIds:
    """Hands out ids unique among the requests in flight; ``release`` when one ends."""

    __slots__ = ("_counter", "_in_flight", "_prefix")

    def __init__(self, prefix: str | None = None) -> None:
        self._prefix = prefix if prefix is not None else os.urandom(4).hex()
        self._counter = itertools.count(1)
        self._in_flight: set[str] = set()

    def claim(self, given: str | None) -> str:
        """``given`` when no request in flight has it, else ``given`` with a suffix; a new
        id when ``given`` is not ``usable`` (it is echoed in a header, logged and sent on)."""
        request_id = given if usable(given) else self._generated()
        if request_id in self._in_flight:
            request_id = f"{request_id}-{self._generated()}"
        self._in_flight.add(request_id)
        return request_id

    def release(self, request_id: str) -> None:
        self._in_flight.discard(request_id)

    def __len__(self) -> int:
        return len(self._in_flight)

    def _generated(self) -> str:
        return f"{self._prefix}-{next(self._counter)}"


def echo_request_id(header: str) -> Callable[[web.Request, web.StreamResponse],
                                              Awaitable[None]]:
    """An ``on_response_prepare`` hook: every answer to a request that carried ``header``
    echoes it, the answers no decision gave an id too (``/v1/models``, an unknown path, a
    wrong method); an answer that set its own (a routed request's, suffixed or replaced) keeps
    it, and an id that is not printable ASCII is not echoed."""
    async def echo(request: web.Request, response: web.StreamResponse) -> None:
        given = request.headers.get(header)
        if usable(given) and header not in response.headers:
            response.headers[header] = given
    return echo
