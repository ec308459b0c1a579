"""What text a name a client or an operator gives may hold: a tenant, a model or adapter
name, a metric label value.

``str.isprintable`` refuses every format character and every space but ASCII's, among them
the zero-width joiner and non-joiner that Persian and Hindi words and emoji sequences are
written with (``شرکت‌ما``, a family emoji), the BOM and the ideographic space: such a tenant was
refused with 400 while a routing file's budget could name it. ``is_name_text`` takes those,
and still refuses what would make a name ambiguous to a reader or unsafe in a log line or a
header: control characters, line and paragraph separators, lone surrogates, private-use and
unassigned code points, and the bidirectional controls that can show a name as another.
"""

from __future__ import annotations

import unicodedata

# the bidirectional embeddings, overrides, isolates and marks (text shown as other text)
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                          "\u2066\u2067\u2068\u2069")


def is_name_text(text: str) -> bool:
    """Whether ``text`` is printable, or holds besides only spaces (``Zs``) and format
    characters (``Cf``) other than the bidirectional controls."""
    if text.isprintable():
        return True
    category = unicodedata.category
    return all(char.isprintable()
               or (category(char) in ("Zs", "Cf") and char not in BIDI_CONTROLS)
               for char in text)
