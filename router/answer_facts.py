"""What the router reads from a whole (not streamed) answer: its usage and fingerprint.

The token counts feed the metrics and the cost, and the ``system_fingerprint`` is kept per
worker for the stream rewrite (``router.proxy_usage``). An answer of up to
``WHOLE_PARSE_MAX_BYTES`` is parsed whole. A larger one (embeddings of many inputs, logprobs
of a long answer: megabytes of numbers) is not: parsing it held the event loop, every other
client waiting (a 10 MB embeddings answer: 170 ms). Its usage and fingerprint are found
by their keys from its end (vLLM writes them after ``choices`` or ``data``; only
``prompt_logprobs``, ``prompt_token_ids`` and ``kv_transfer_params`` may follow), and only
their values are parsed.

A key is found as its bytes followed by a colon: inside a JSON string a quote is escaped, so
``"usage":`` in a prompt, an answer or a tool's arguments never reads as one; a string value
``"usage"`` (a token decoded as that word, in ``prompt_logprobs``) is followed by a comma
or a bracket, not a colon, and is passed over. The last key whose value has the expected
kind is taken (the usage an object or null, the fingerprint a string or null): a nested
object with a ``usage`` object after the top-level one would be read instead (vLLM writes
none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import orjson

from router.proxy_usage import Usage, parse_usage

# answers up to this size are parsed whole (0.1 ms of the loop, or so, at most)
WHOLE_PARSE_MAX_BYTES = 256 * 1024
# how far past its key a value is read (a usage object is some 200 bytes)
VALUE_WINDOW_BYTES = 16 * 1024
_USAGE_KEY = b'"usage"'
_FINGERPRINT_KEY = b'"system_fingerprint"'
_DECODER = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class AnswerFacts:
    usage: Usage | None
    has_fingerprint: bool           # the answer has a ``system_fingerprint`` key
    fingerprint: str | None         # its value, when a string


NO_FACTS = AnswerFacts(None, False, None)


def answer_facts(data: bytes) -> AnswerFacts:
    """The usage and fingerprint of a JSON answer's body (``NO_FACTS`` for one that is not
    a JSON object)."""
    if len(data) <= WHOLE_PARSE_MAX_BYTES:
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            return NO_FACTS
        if not isinstance(parsed, dict):
            return NO_FACTS
        fingerprint = parsed.get("system_fingerprint")
        return AnswerFacts(parse_usage(parsed.get("usage")), "system_fingerprint" in parsed,
                           fingerprint if isinstance(fingerprint, str) else None)
    if data[:4096].lstrip()[:1] != b"{":          # an array, a text: no object to read
        return NO_FACTS
    _, usage = last_value(data, _USAGE_KEY, b"{n")
    has_fingerprint, fingerprint = last_value(data, _FINGERPRINT_KEY, b'"n')
    return AnswerFacts(parse_usage(usage), has_fingerprint,
                       fingerprint if isinstance(fingerprint, str) else None)


def last_value(data: bytes, key: bytes, starts: bytes) -> tuple[bool, object]:
    """(found, value) of the last ``key`` (its quoted bytes) of a JSON text that is followed
    by a colon and a value whose first byte is one of ``starts``; a value that does not
    parse is (True, None). Each occurrence costs a look at a few bytes: linear in all."""
    end = len(data)
    while True:
        at = data.rfind(key, 0, end)
        if at < 0:
            return False, None
        end = at
        after = at + len(key)
        head = data[after:after + 64].lstrip()
        if not head.startswith(b":") or _escaped(data, at):
            continue
        first = head[1:].lstrip()[:1]
        if not first or first not in starts:
            continue
        rest = data[after:after + VALUE_WINDOW_BYTES].lstrip()[1:]
        try:
            value, _ = _DECODER.raw_decode(rest.decode("utf-8", "replace").lstrip())
        except ValueError:
            return True, None
        return True, value


def _escaped(data: bytes, quote_at: int) -> bool:
    """Whether the quote at ``quote_at`` is escaped (an odd run of backslashes before it)."""
    backslashes = 0
    at = quote_at - 1
    while at >= 0 and data[at] == 0x5C:
        backslashes += 1
        at -= 1
    return backslashes % 2 == 1
