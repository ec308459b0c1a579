"""What text a name a client or an operator gives may hold: a tenant, a model or adapter
name, a metric label value.

``str.isprintable`` refuses every format character and every space but ASCII's, among them
the zero-width joiner and non-joiner that Persian and Hindi words and emoji sequences are
written with (``شرکت‌ما``, a family emoji) and the ideographic space: such a tenant was
refused with 400 while a routing file's budget could name it. ``is_name_text`` takes those
two joiners and every space, and still refuses what would make a name ambiguous to a reader
or unsafe in a log line or a header: control characters, line and paragraph separators, lone
surrogates, private-use and unassigned code points, every other format character (the
bidirectional controls that show a name as another, zero-width spaces and tags that make
``acme`` and another name look alike), and a name with nothing visible in it.
"""

from __future__ import annotations

import unicodedata

# the format characters words are written with: zero-width non-joiner and joiner
JOINERS = frozenset("\u200c\u200d")


def is_name_text(text: str) -> bool:
    """Whether ``text`` is printable, or holds besides only spaces (``Zs``) and the two
    joiners, and something visible."""
    if text.isprintable():
        return not text.isspace()
    category = unicodedata.category
    return (all(char.isprintable() or char in JOINERS or category(char) == "Zs"
                for char in text)
            and any(char.isprintable() and not char.isspace() for char in text))
