"""The one rewrite the router makes to a relayed stream: the usage chunk it asked for.

The router always asks a streaming worker for the final usage chunk
(``stream_options.include_usage``): it needs the token counts. When the client did not ask
for it, the client must get exactly what vLLM sends without ``include_usage``, which is more
than the stream minus that chunk: vLLM stamps ``system_fingerprint`` on the usage chunk when
there is one, and otherwise on every chunk that carries a ``finish_reason`` (one per choice).
So, for such a client, ``UsageRewrite``

* drops the usage chunk (after reading its counts and fingerprint);
* holds back a chunk carrying a ``finish_reason`` until the next event arrives (ordinary
  token chunks are never delayed): when that event is the usage chunk, the held chunks get
  its fingerprint; when it is anything else (with ``n > 1`` another choice may still be
  generating), they get the fingerprint this worker sent last (``known_fingerprint``: it is
  fixed for a server's lifetime), or stay as they are when none is known.

The fingerprint goes last in the chunk's JSON object, where vLLM serializes it (after
``choices``; continuous usage is never on for such a client). Events come without the
blank-line terminator (the caller cuts the byte stream at event boundaries); their JSON is
read wherever their ``data:`` lines are (``router.stream_events``).

A Responses API stream (``event: response.…`` / ``data: …`` pairs) is relayed untouched; its
usage is read from the event that carries the finished response. So is a Messages API stream
(Anthropic's events), whose usage is read from its ``message_delta`` event.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import orjson

from router.stream_events import carries_data, event_data

_USAGE_MARKS = (b'"choices":[]', b'"choices": []')
_FINISH_MARKS = (b'"finish_reason":"', b'"finish_reason": "')
_FINGERPRINT_KEY = b'"system_fingerprint"'


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None


def parse_usage(raw: object) -> Usage | None:
    """Chat / completions / embeddings usage, the Responses API's (``input_tokens``,
    ``output_tokens``, ``input_tokens_details.cached_tokens``) or the Messages API's, whose
    ``input_tokens`` leave out ``cache_read_input_tokens`` and
    ``cache_creation_input_tokens`` (vLLM sends those only with prompt token details on)."""
    if not isinstance(raw, dict):
        return None
    try:
        if "cache_read_input_tokens" in raw or "cache_creation_input_tokens" in raw:
            read = raw.get("cache_read_input_tokens")
            return Usage(prompt_tokens=_count(raw.get("input_tokens"))
                         + _count(raw.get("cache_creation_input_tokens")) + _count(read),
                         completion_tokens=_count(raw.get("output_tokens")),
                         cached_tokens=_count(read) if read is not None else None)
        if "input_tokens" in raw:
            details = raw.get("input_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            return Usage(prompt_tokens=_count(raw.get("input_tokens")),
                         completion_tokens=_count(raw.get("output_tokens")),
                         cached_tokens=_count(cached) if cached is not None else None)
        details = raw.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        return Usage(prompt_tokens=_count(raw.get("prompt_tokens")),
                     completion_tokens=_count(raw.get("completion_tokens")),
                     cached_tokens=_count(cached) if cached is not None else None)
    except ValueError:       # a count that is not one: no usage (the worker's fault)
        return None


# more tokens than any answer holds: a worker's count past it is not a count
MAX_COUNT = 10**12


def _count(value: object) -> int:
    """A token count a worker sent: absent (None) is 0; anything but an integer in
    [0, MAX_COUNT] (a string, a float, a negative or huge number) raises ValueError."""
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"not a token count: {value!r}")
    return value


def is_response_event_with_usage(event: bytes) -> bool:
    """A Responses API event (``event: response.…``) whose response carries its usage."""
    return event.startswith(b"event: response.") and b'"usage":{' in event


def is_message_delta_with_usage(event: bytes) -> bool:
    """The Messages API's ``message_delta`` event, which carries the final usage."""
    return event.startswith(b"event: message_delta") and b'"usage":{' in event


def is_usage_chunk(event: bytes) -> bool:
    return (b'"usage"' in event and any(mark in event for mark in _USAGE_MARKS)
            and carries_data(event))


def carries_finish_reason(event: bytes) -> bool:
    return any(mark in event for mark in _FINISH_MARKS) and carries_data(event)


def with_fingerprint(event: bytes, fingerprint: str) -> bytes:
    """``event`` with ``"system_fingerprint"`` added as the last key of its JSON object
    (unchanged when it already has one or is not a JSON object)."""
    body = event.rstrip()
    if not body.endswith(b"}") or _FINGERPRINT_KEY in body:
        return event
    return body[:-1] + b',"system_fingerprint":' + orjson.dumps(fingerprint) + b"}"


class UsageRewrite:
    """One stream's usage handling: counts for the router, vLLM's own events for the client."""

    __slots__ = ("_held", "_known_fingerprint", "_wants_usage", "fingerprint", "saw_usage",
                 "usage")

    def __init__(self, wants_usage: bool, known_fingerprint: str | None = None) -> None:
        self._wants_usage = wants_usage
        self._known_fingerprint = known_fingerprint
        self._held: list[bytes] = []
        self.usage: Usage | None = None
        self.saw_usage = False
        self.fingerprint: str | None = None      # the usage chunk's, once it has arrived

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def needs_events(self, data: bytes) -> bool:
        """Whether complete events ``data`` must go through ``events`` (else: relay as is)."""
        if self._held or b'"usage"' in data:
            return True
        return not self._wants_usage and any(mark in data for mark in _FINISH_MARKS)

    def events(self, events: list[bytes]) -> list[bytes]:
        """The events to send the client now, in order; finish chunks may be held back."""
        out: list[bytes] = []
        for event in events:
            if is_usage_chunk(event):
                self._read_usage(event)
                out += self._release(self.fingerprint)
                if self._wants_usage:
                    out.append(event)
            elif is_response_event_with_usage(event):       # the Responses API's last event
                self._read_response_usage(event, "response")
                out += self._release(self._known_fingerprint)
                out.append(event)
            elif is_message_delta_with_usage(event):        # the Messages API's usage
                self._read_response_usage(event, None)
                out.append(event)
            elif not self._wants_usage and carries_finish_reason(event):
                self._held.append(event)
            else:
                out += self._release(self._known_fingerprint)
                out.append(event)
        return out

    def flush(self) -> list[bytes]:
        """The held events, when the stream ends or breaks before another event."""
        return self._release(self._known_fingerprint)

    def _read_usage(self, event: bytes) -> None:
        self.saw_usage = True
        data = event_data(event)
        with contextlib.suppress(orjson.JSONDecodeError):
            parsed = orjson.loads(data) if data is not None else None
            if isinstance(parsed, dict):
                self.usage = parse_usage(parsed.get("usage"))
                fingerprint = parsed.get("system_fingerprint")
                self.fingerprint = fingerprint if isinstance(fingerprint, str) else None

    def _read_response_usage(self, event: bytes, key: str | None) -> None:
        """The usage of an ``event: …`` / ``data: {…}`` pair: under ``data[key]`` (None: in
        ``data`` itself)."""
        data = event_data(event)
        with contextlib.suppress(orjson.JSONDecodeError):
            parsed = orjson.loads(data) if data is not None else None
            holder = parsed.get(key) if key is not None and isinstance(parsed, dict) else parsed
            if isinstance(holder, dict):
                self.usage = parse_usage(holder.get("usage"))

    def _release(self, fingerprint: str | None) -> list[bytes]:
        held, self._held = self._held, []
        if fingerprint is None:
            return held
        return [with_fingerprint(event, fingerprint) for event in held]
