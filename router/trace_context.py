"""W3C trace context (``traceparent``, ``tracestate``) carried from a client to its worker.

vLLM started with ``--otlp-traces-endpoint`` makes each request's span a child of the trace
context the request carries. kvroute passes that context on as an intermediary that adds no
span of its own: every attempt at a worker carries the client's ``traceparent`` and its
``tracestate``, unchanged, so the engine's spans join the client's trace instead of starting
traces of their own. A ``traceparent`` that is not valid (W3C Trace Context, level 1) is not
passed on, nor is its ``tracestate``: a receiver would discard both. The trace id also names
the routing decision in ``/debug/decisions`` and the decision log, to go from a trace to the
decision that placed the request, and back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
# W3C: a tracestate of more than 32 list members is discarded whole
MAX_TRACESTATE_MEMBERS: Final = 32

# version "-" trace id "-" parent id "-" flags, lowercase hex; a later version may add fields
_TRACEPARENT: Final = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[ -~]*)?")
_NO_TRACE: Final = "0" * 32
_NO_PARENT: Final = "0" * 16


def trace_id(traceparent: str | None) -> str | None:
    """The trace id of a valid ``traceparent`` header value, else None."""
    if not traceparent:
        return None
    match = _TRACEPARENT.fullmatch(traceparent.strip(" \t"))
    if match is None:
        return None
    version, trace, parent, _, more = match.groups()
    if version == "ff" or (version == "00" and more) or trace == _NO_TRACE or (
            parent == _NO_PARENT):
        return None
    return trace


def request_trace_id(headers: Mapping[str, str]) -> str | None:
    """The trace id a request's headers carry (None: none, or not a valid one)."""
    return trace_id(headers.get(TRACEPARENT))


def trace_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The trace context to send a worker with a request that came with ``headers``: its
    valid ``traceparent`` and, with it, its ``tracestate`` (several headers joined, as one
    list), or nothing."""
    traceparent = headers.get(TRACEPARENT)
    if traceparent is None or trace_id(traceparent) is None:
        return {}
    getall = getattr(headers, "getall", None)
    if getall is not None and len(getall(TRACEPARENT)) > 1:
        return {}        # several: not one trace to join (W3C: the receiver starts anew)
    forwarded = {TRACEPARENT: traceparent.strip(" \t")}
    states = getall(TRACESTATE, ()) if getall is not None else (
        [headers[TRACESTATE]] if TRACESTATE in headers else [])
    state = ",".join(part.strip(" \t") for part in states if part.strip(" \t"))
    members = sum(1 for member in state.split(",") if member.strip(" \t"))
    if state and state.isascii() and state.isprintable() and (
            members <= MAX_TRACESTATE_MEMBERS):
        forwarded[TRACESTATE] = state
    return forwarded
