"""Log-probabilities of the emulator's generated tokens, in vLLM's shapes.

The emulator samples nothing, so its numbers are made up, but made up the same way every
time: a token's log-probability is a function of its id and its position in the answer
(between -0.05 and -3.05), and its alternatives are the next tokens of the output vocabulary,
each 0.25 less likely than the one before. What a client reads is shaped as vLLM writes it:

* chat (``logprobs: true``, ``top_logprobs: k``): ``{"content": [{"token", "logprob",
  "bytes", "top_logprobs": [k of {"token", "logprob", "bytes"}, the chosen first]}]}``, the
  alternatives empty for ``k`` = 0;
* completions (``logprobs: k``): ``{"text_offset", "token_logprobs", "tokens",
  "top_logprobs": [{token: logprob}, ...]}``, the chosen token and ``k - 1`` others per
  token (the chosen alone for ``k`` = 0), ``text_offset`` each token's first character in
  the answer.

A streamed answer carries each chunk's tokens' entries in that chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Pieces(Protocol):
    """What the emulator's tokenizer gives this module."""

    output_vocabulary: tuple[int, ...]

    def piece(self, token_id: int) -> str: ...


def logprob(token_id: int, position: int) -> float:
    """The made-up log-probability of ``token_id`` at ``position`` of an answer."""
    return -0.05 - ((token_id * 2654435761 + position * 40503) % 3001) / 1000.0


def _alternatives(tok: Pieces, token_id: int, position: int, count: int
                  ) -> list[tuple[int, float]]:
    """The chosen token and ``count - 1`` others, most likely first."""
    chosen = logprob(token_id, position)
    vocabulary = tuple(dict.fromkeys(tok.output_vocabulary))     # each token once
    start = (token_id + position) % len(vocabulary)
    others = [t for t in (vocabulary[(start + i) % len(vocabulary)]
                          for i in range(len(vocabulary)))
              if t != token_id][:max(0, count - 1)]
    return [(token_id, chosen), *((t, chosen - 0.25 * (i + 1)) for i, t in enumerate(others))]


def chat_logprobs(tok: Pieces, token_ids: Sequence[int], first_position: int,
                  top: int) -> dict[str, Any]:
    """The chat form of these tokens' log-probabilities (``first_position``: the first one's
    position in the answer; ``top``: ``top_logprobs``)."""
    content = []
    for offset, token_id in enumerate(token_ids):
        position = first_position + offset
        piece = tok.piece(token_id)
        content.append({
            "token": piece, "logprob": logprob(token_id, position),
            "bytes": list(piece.encode()),
            "top_logprobs": [{"token": tok.piece(t), "logprob": value,
                              "bytes": list(tok.piece(t).encode())}
                             for t, value in _alternatives(tok, token_id, position, top)]
            if top else []})
    return {"content": content}


def completion_logprobs(tok: Pieces, token_ids: Sequence[int], first_position: int,
                        first_offset: int, top: int) -> dict[str, Any]:
    """The completions form (``first_offset``: the characters of the answer before these
    tokens; ``top``: ``logprobs``)."""
    offsets, values, tokens, tops = [], [], [], []
    offset = first_offset
    for i, token_id in enumerate(token_ids):
        position = first_position + i
        piece = tok.piece(token_id)
        offsets.append(offset)
        values.append(logprob(token_id, position))
        tokens.append(piece)
        tops.append({tok.piece(t): value
                     for t, value in _alternatives(tok, token_id, position, max(1, top))})
        offset += len(piece)
    return {"text_offset": offsets, "token_logprobs": values, "tokens": tokens,
            "top_logprobs": tops}
