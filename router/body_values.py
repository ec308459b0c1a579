"""A bound on the JSON values a request body holds, checked before the body is parsed.

Parsed, each JSON value is a Python object: a body at the 32 MiB size limit made of tiny
items (``[{},{},...]``, ``["ab","ab",...]``) became 7 to 11 million objects, 0.6 to 1 GB of
the router's memory and up to a second of its CPU, held for the whole request. The byte
limit alone does not bound that; the number of values does. Every value but a container's
first follows a comma, so commas plus opening brackets plus one bound the values a body
holds, whatever they are (strings and numbers included). That bound counts the commas and
brackets inside strings too: when it passes the limit and the body has few strings (a long
text full of commas, a batch of documents), those inside its strings are taken off before
it is refused. A body of more strings than ``EXACT_FROM_STRINGS`` is refused on the bound:
splitting it into a million strings would cost what the parse costs.

Small bodies are not counted: a body under ``COUNTED_FROM_BYTES`` cannot hold enough values
to matter.
"""

from __future__ import annotations

from router.errors import RequestTooLarge

# values a body may hold: a batch of 1,900 prompts of 1,000 token ids each fits; parsed, two
# million short strings take about 180 MB, two million numbers about 120 MB
MAX_BODY_VALUES = 2_000_000
COUNTED_FROM_BYTES = 1 << 20
EXACT_FROM_STRINGS = 200_000


def values_at_most(body: bytes) -> int:
    """An upper bound of the JSON values ``body`` holds (commas and brackets inside strings
    counted too)."""
    return body.count(b",") + body.count(b"[") + body.count(b"{") + 1


def strings_in(body: bytes) -> int:
    """At most how many strings ``body`` holds (members' names included): its quotes by two,
    escaped ones counted too, so that walking its strings is bounded by it (with those taken
    off, millions of ``"\\\\"`` would count as none, and be walked)."""
    return body.count(b'"') // 2


def separators_inside_strings(body: bytes) -> int:
    """The commas and opening brackets of ``body`` that are inside its strings: with its
    escapes taken off (an escaped backslash, then an escaped quote), its quotes split it into
    what is outside strings and what is inside, in turn (a string left open runs to the end).
    Passes in C over the body, none of them a search that can fail and start again (a regular
    expression for a string, tried at each quote of a body of unclosed ones, took minutes)."""
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    return sum(piece.count(b",") + piece.count(b"[") + piece.count(b"{")
               for piece in unescaped.split(b'"')[1::2])


def check_body_values(body: bytes, limit: int = MAX_BODY_VALUES) -> None:
    """Raise ``RequestTooLarge`` (413) when ``body`` holds more than ``limit`` JSON values."""
    if len(body) < COUNTED_FROM_BYTES:
        return
    bound = values_at_most(body)
    if bound <= limit:
        return
    if strings_in(body) <= EXACT_FROM_STRINGS:
        bound -= separators_inside_strings(body)
        if bound <= limit:
            return
    raise RequestTooLarge(
        f"Request body too large: it holds more than the router's limit of {limit:,} JSON "
        "values (items of its arrays and objects, counted by its commas and opening "
        "brackets): send fewer items per request.")
