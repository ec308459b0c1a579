"""Text the router puts in response headers: one line of visible ASCII.

A reason, a worker's error or an id a client chose may hold anything (line breaks, non-ASCII
letters, Unicode line separators); a header value must not. ``header_safe`` replaces what
does not fit with ``?`` and keeps at most ``MAX_HEADER_CHARS`` characters.
"""

from __future__ import annotations

MAX_HEADER_CHARS = 300


def header_safe(text: str) -> str:
    if text.isascii() and text.isprintable() and len(text) <= MAX_HEADER_CHARS:
        return text
    cleaned = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in text)
    return cleaned[:MAX_HEADER_CHARS]
