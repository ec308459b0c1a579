"""What the router reads in one event of a relayed stream (SSE), whatever its field layout.

vLLM writes each event as one ``data: <json>`` line, which the fast paths here take as is;
a proxy in front of it (or another server) may write what SSE also allows: ``data:`` without
the space, the data over several ``data:`` lines, ``event:``, ``id:`` or ``retry:`` lines
around it, comments (lines that start with ``:``, vLLM's keep-alives). Events come without
their blank-line terminator, their lines ending in LF.

A worker tells of a failure after the stream began in the stream itself: vLLM's chat and
completions send ``data: {"error": {…, "code": 500}}`` (``{"object": "error", …}`` before
v0.10.1) and then ``[DONE]``; the Responses and Messages APIs send an ``event: error``.
``error_status`` reads the HTTP status such an event stands for.
"""

from __future__ import annotations

import orjson

_DATA = b"data:"
_EVENT_ERROR = b"event: error"

# the error types of the Messages API and their HTTP statuses: Anthropic's (its API's
# documented mapping) and vLLM's, which it writes in Anthropic's shape
_ANTHROPIC_STATUS = {
    "invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429,
    "api_error": 500, "overloaded_error": 529,
    "BadRequestError": 400, "Bad Request": 400, "NotFoundError": 404,
    "NotImplementedError": 501, "InternalServerError": 500, "ServiceUnavailableError": 503}
# a failure whose status the worker did not say: its own (a server error)
UNSAID_STATUS = 500


def event_data(event: bytes) -> bytes | None:
    """The event's data (its ``data:`` lines' values joined by LF, each without the one
    space after the colon), None when it has none (a comment, a ``retry:``)."""
    if event.startswith(b"data: ") and b"\n" not in event:        # vLLM's
        return event[6:]
    values = [line[6:] if line.startswith(b"data: ") else line[5:]
              for line in event.split(b"\n") if line.startswith(_DATA)]
    return b"\n".join(values) if values else None


def carries_data(event: bytes) -> bool:
    """Whether the event has a ``data:`` line (comments and ``retry:`` alone have none)."""
    return event.startswith(_DATA) or b"\n" + _DATA in event


def _status(code: object) -> int:
    return code if type(code) is int and 400 <= code <= 599 else UNSAID_STATUS


def openai_error_status(event: bytes) -> int | None:
    """The status of a chat or completions stream's error event (its ``code``; 500 when it
    gives none), None for any other event."""
    if b'"error"' not in event:      # (a token's text has its quotes escaped)
        return None
    data = event_data(event)
    try:
        parsed = orjson.loads(data) if data is not None else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    error = parsed.get("error")
    if error:
        return _status(error.get("code")) if isinstance(error, dict) else UNSAID_STATUS
    return _status(parsed.get("code")) if parsed.get("object") == "error" else None


def named_error_status(event: bytes) -> int | None:
    """The status of an ``event: error`` of the Responses API (its ``code``, a number or a
    name) or of the Messages API (its ``error.type``), None for any other event."""
    if not event.startswith(_EVENT_ERROR):
        return None
    data = event_data(event)
    try:
        parsed = orjson.loads(data) if data is not None else None
    except orjson.JSONDecodeError:
        return UNSAID_STATUS
    if not isinstance(parsed, dict):
        return UNSAID_STATUS
    error = parsed.get("error")
    if isinstance(error, dict):                              # the Messages API's
        return _ANTHROPIC_STATUS.get(str(error.get("type")), UNSAID_STATUS)
    code = parsed.get("code")                                # the Responses API's
    if isinstance(code, str):
        return 400 if "invalid" in code or "bad_request" in code else UNSAID_STATUS
    return _status(code)
