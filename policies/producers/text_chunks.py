"""Cut a prompt's text where the tokenizer always starts a new piece, so that each chunk
tokenizes alone to exactly the tokens it has inside the whole text.

tiktoken tokenizes a text in two steps: a regular expression splits it into pieces, then
each piece is turned into tokens by BPE on its own. Tokens therefore never cross a piece
boundary, and wherever the whole text's split has a boundary that the split of each side
alone has too, ``encode(a + b) == encode(a) + encode(b)``. A chat resends its whole history
every turn; cut at such places, the history's chunks are found in a cache and only the
newest part is tokenized again (``policies.producers.tokens``).

**Where.** For the cl100k pattern of ``SPLITTABLE_PATTERNS``, a position ``p`` with
``text[p - 1] == "\\n"`` and ``text[p]`` not whitespace is such a boundary. The pattern's
alternatives, in order::

    '(?i:[sdmt]|ll|ve|re) | [^\\r\\n\\p{L}\\p{N}]?+\\p{L}++ | \\p{N}{1,3}+
    |  ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+ | \\s++$ | \\s*[\\r\\n] | \\s+(?!\\S) | \\s

* No piece holds both the line feed and the character after it: the first three
  alternatives never take a line feed, the fourth takes line feeds only at its end (and
  stops at ``text[p]``, which is not one), and the last four take only whitespace.
* The left side alone splits as the whole text does before ``p``. Only an alternative that
  reads up to ``p`` could act differently, and reaching ``p`` means taking the line feed:
  the fourth stops there either way; ``\\s++$`` now matches the whitespace run that ends
  the left side, which is the very run that ``\\s*[\\r\\n]`` matches in the whole text
  (the run ends with the line feed, and ``text[p]`` is not whitespace).
* The right side alone splits as the whole text does from ``p``: the pattern has no
  look-behind and no start anchor.

"Not whitespace" is Python's ``str.isspace`` being false; every character of Unicode's
``White_Space`` (what ``\\s`` means to tiktoken's regex engine) is ``isspace`` in Python, so
a character Python calls non-whitespace is non-whitespace to tiktoken too (the tests check
both this and the tokens). Other patterns (o200k lets ``/`` follow line feeds inside a
piece; HuggingFace tokenizers add normalizers and added tokens) are not known to be
splittable: their texts are tokenized whole.

**How much.** Cuts are greedy: the first boundary at least ``min_chars`` after the previous
cut. A text that extends an earlier one (the next turn of a conversation) is cut at the
same places up to the earlier text's last chunk, so all but that chunk and the new text are
found again.
"""

from __future__ import annotations

import re
from itertools import pairwise

# tiktoken's cl100k_base pattern (and the offline copy's), as tiktoken 0.8+ ships it
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
                  r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
SPLITTABLE_PATTERNS = frozenset({CL100K_PATTERN})

# a line feed followed by a character that is not whitespace (Python's \S is not isspace)
_BOUNDARY = re.compile(r"\n(?=\S)")


def is_splittable(pattern: str) -> bool:
    """Whether texts for a tokenizer with this split pattern may be cut at line feeds."""
    return pattern in SPLITTABLE_PATTERNS


def cut_positions(text: str, min_chars: int) -> list[int]:
    """Where to cut ``text``: boundaries (see the module docstring), each the first one at
    least ``min_chars`` (>= 1) after the previous cut; never 0 or ``len(text)``."""
    cuts: list[int] = []
    search = _BOUNDARY.search
    start = 0
    while True:
        # the line feed sits right before the cut: a cut at >= start + min_chars needs a
        # line feed at >= start + min_chars - 1
        found = search(text, start + min_chars - 1)
        if found is None:
            return cuts
        start = found.end()
        cuts.append(start)


def split_text(text: str, min_chars: int) -> list[str]:
    """``text`` cut at ``cut_positions`` (one chunk, the text itself, when there is none)."""
    cuts = cut_positions(text, min_chars)
    if not cuts:
        return [text]
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in pairwise(bounds)]
