"""Request ids: the client's own (``x-request-id``) or generated, unique among the requests
in flight at this router.

The id keys the policies' per-request state (in-flight prefixes, the decode guard's
incumbents, the latency predictions awaiting their outcome) and travels to the worker as
``X-Request-Id``, which vLLM names the answer after and aborts by (a worker that keys its
requests by that id alone refuses a second while the first runs: 400 "already running";
vLLM 0.32 adds random characters of its own in its engine). Clients may send the same id
twice at once (a retry that does not wait, a fixed id in a script): the second gets the
first's id with a suffix, which the response's ``x-request-id`` then reports. An id that is
not printable ASCII (it is echoed in a response header, which carries visible ASCII:
``router.header_values``), or longer than 256 characters, is replaced by a new one.

A request whose connection to its worker the router closed while the worker was running it
(its client left, the router stopped waiting) is still running there for a moment: the
worker aborts it when it notices. Its id stays taken ``HELD_AFTER_CUT_S`` more
(``hold_after_release``), so that a client sending it again at once (a "stop" pressed, then
the next question) gets a suffix rather than sharing an id with a request still running.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from typing import TypeGuard

from aiohttp import web

from router.errors import ANTHROPIC_PATH_PREFIX

# the field of Anthropic's answers that names the request, on the Messages API's
ANTHROPIC_REQUEST_ID = "request-id"
# the longest id taken from a client: it is echoed, logged, kept with each decision and sent on
MAX_REQUEST_ID_CHARS = 256
# how long the id of a request cut at its worker stays taken after it ends, and how many such
# ids are held at most (a storm of aborts holds the newest)
HELD_AFTER_CUT_S = 2.0
MAX_HELD_IDS = 100_000
# the random bytes of a generated id (after the process's prefix): unique among those in
# flight however many (``claim`` draws again on a clash)
GENERATED_BYTES = 8


def usable(given: str | None) -> TypeGuard[str]:
    """Whether a client's request id is taken (else one is generated): printable ASCII
    (no control characters, no bytes outside ASCII, which a header echoing it would carry
    raw) of at most ``MAX_REQUEST_ID_CHARS``."""
    return (given is not None and 0 < len(given) <= MAX_REQUEST_ID_CHARS
            and given.isascii() and given.isprintable())


class RequestIds:
    """Hands out ids unique among the requests in flight; ``release`` when one ends."""

    __slots__ = ("_clock", "_held", "_in_flight", "_prefix", "_to_hold")

    def __init__(self, prefix: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._prefix = prefix if prefix is not None else os.urandom(4).hex()
        self._in_flight: set[str] = set()
        self._to_hold: set[str] = set()          # in flight, to be held once released
        self._held: dict[str, float] = {}        # released, held until: oldest first
        self._clock = clock

    def claim(self, given: str | None) -> str:
        """``given`` when no request in flight has it (nor holds it, ``hold_after_release``),
        else ``given`` with a suffix; a new id when ``given`` is not ``usable`` (it is echoed
        in a header, logged and sent on)."""
        request_id = given if usable(given) else self._generated()
        base = request_id
        while request_id in self._in_flight or self._held_still(request_id):
            # (a client may send a suffixed id it was given back: the next suffix then)
            request_id = f"{base}-{self._generated()}"
        self._in_flight.add(request_id)
        return request_id

    def hold_after_release(self, request_id: str) -> None:
        """The request's worker may run it a moment after it ends here (the router closed
        its connection while the worker was running it): its id stays taken
        ``HELD_AFTER_CUT_S`` after ``release``."""
        if request_id in self._in_flight:
            self._to_hold.add(request_id)

    def release(self, request_id: str) -> None:
        self._in_flight.discard(request_id)
        if request_id in self._to_hold:
            self._to_hold.discard(request_id)
            held = self._held
            held.pop(request_id, None)           # (its place is at the end)
            if len(held) >= MAX_HELD_IDS:
                del held[next(iter(held))]
            held[request_id] = self._clock() + HELD_AFTER_CUT_S

    def _held_still(self, request_id: str) -> bool:
        """Whether ``request_id`` is held; those whose time is up are dropped first."""
        held = self._held
        if not held:
            return False
        now = self._clock()
        while held:
            oldest = next(iter(held))
            if held[oldest] > now:
                break
            del held[oldest]
        return request_id in held

    def __len__(self) -> int:
        return len(self._in_flight)

    def _generated(self) -> str:
        """The process's prefix and random bits: a count would tell every client how many
        requests the router took (the id names the answer: ``chatcmpl-<id>``)."""
        return f"{self._prefix}-{os.urandom(GENERATED_BYTES).hex()}"


def echo_request_id(header: str) -> Callable[[web.Request, web.StreamResponse],
                                              Awaitable[None]]:
    """An ``on_response_prepare`` hook: every answer to a request that carried ``header``
    echoes it, the answers no decision gave an id too (``/v1/models``, an unknown path, a
    wrong method); an answer that set its own (a routed request's, suffixed or replaced) keeps
    it, and an id that is not printable ASCII is not echoed. An answer of Anthropic's Messages
    API (``/v1/messages…``) carries the id as ``request-id`` too, the field Anthropic's API
    answers with and its clients read (``_request_id``, an error's ``request_id``)."""
    async def echo(request: web.Request, response: web.StreamResponse) -> None:
        headers = response.headers
        given = request.headers.get(header)
        if usable(given) and header not in headers:
            headers[header] = given
        path = request.path
        if (path == ANTHROPIC_PATH_PREFIX or path.startswith(ANTHROPIC_PATH_PREFIX + "/")) \
                and header in headers and ANTHROPIC_REQUEST_ID not in headers:
            headers[ANTHROPIC_REQUEST_ID] = headers[header]
    return echo
