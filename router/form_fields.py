"""The few text fields of a ``multipart/form-data`` body the router reads, the body untouched.

vLLM's audio APIs (``/v1/audio/transcriptions``, ``/v1/audio/translations``) take a form: the
audio file and fields such as ``model`` and ``stream``. The router forwards the body as it
came and needs only those two, so it scans the parts' heads for their names and decodes
none but the short text parts asked for (a field with a ``filename`` is a file, never read):

* ``boundary_of(content_type)``: the boundary of a ``multipart/form-data`` type, else None;
* ``form_fields(body, boundary, names)``: ``{name: value}`` of the named text fields found
  (the first of each) among the first ``MAX_PARTS_SCANNED`` parts, values of at most
  ``MAX_FIELD_BYTES``, decoded as UTF-8. (A scan of every part held the event loop 3.6 s for
  a form of 400,000 one-byte fields; vLLM's audio forms have a dozen.)

Malformed bodies give what was found before the fault; the worker judges the rest.
"""

from __future__ import annotations

import re
from collections.abc import Collection

MAX_FIELD_BYTES = 4096
MAX_PART_HEAD_BYTES = 8192
MAX_PARTS_SCANNED = 256

_BOUNDARY = re.compile(r'boundary="?([^";]{1,200})"?', re.IGNORECASE)
_NAME = re.compile(rb'[;\s]name="([^"]*)"', re.IGNORECASE)


def boundary_of(content_type: str) -> str | None:
    """The boundary parameter of a ``multipart/form-data`` content type."""
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        return None
    found = _BOUNDARY.search(params)
    return found.group(1) if found else None


def form_fields(body: bytes, boundary: str, names: Collection[str]) -> dict[str, str]:
    """The named text fields of a form (see the module docstring)."""
    delimiter = b"\r\n--" + boundary.encode("latin-1", "replace")
    found: dict[str, str] = {}
    # the first delimiter may open the body without the line break before it
    position = 0 if body.startswith(delimiter[2:]) else body.find(delimiter)
    start = position + (len(delimiter) - 2 if position == 0 else len(delimiter))
    for _ in range(MAX_PARTS_SCANNED):
        if position < 0 or len(found) == len(names):
            break
        if body[start:start + 2] == b"--":           # the closing delimiter
            break
        head_end = body.find(b"\r\n\r\n", start, start + MAX_PART_HEAD_BYTES)
        if head_end < 0:
            break
        value_start = head_end + 4
        position = body.find(delimiter, value_start)
        if position < 0:
            break
        head = body[start:head_end].lower()
        named = _NAME.search(body[start:head_end])
        if (named is not None and b"filename" not in head
                and position - value_start <= MAX_FIELD_BYTES):
            name = named.group(1).decode("utf-8", "replace")
            if name in names and name not in found:
                found[name] = body[value_start:position].decode("utf-8", "replace")
        start = position + len(delimiter)
    return found
