"""The text of a request that decides its semantic class.

Modes (``semantic.text`` in routing.yaml):

* ``last-user`` (default): the last user message (a completions prompt counts as one);
* ``all-user``: every user message, oldest first, joined by blank lines;
* ``system+last-user``: the system message(s) followed by the last user message.

Only text is read: image parts, audio parts, tool calls and tool results are skipped, token-id
prompts have no text. Invalid Unicode (lone surrogates, undecodable bytes) is replaced, and
the result is cut to its first ``max_chars`` characters (and, when ``tail_chars`` is set, its
last ``tail_chars``: a question often comes last) so that a 1 MB prompt costs no more than a
short one; the embedder then cuts it to its token window. An empty result means "no
evidence": the classifier answers the default class without embedding anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import islice
from typing import Any, Literal

from policies.base import RoutingRequest
from policies.producers.media import MARK_CLOSE, MARK_OPEN

TextMode = Literal["last-user", "all-user", "system+last-user"]

# the marks ``router.protocol`` writes for a Responses API message's images, audio and video
# in its text (``policies.producers.media``: ``<OPEN>kind:<16 hex digits><CLOSE>``): no words
# of the prompt, only a digest's hex digits (which ``digit_weight`` would count). A mark the
# cut split is a head of one ending a line (the head's cut) or a tail of one starting a line
# (the tail's cut); only those shapes go, so a private-use character of the user's own
# (U+E000 is a Nerd Fonts glyph) takes no words with it
_MEDIA_MARK = re.compile(
    f"{MARK_OPEN}(?:image|audio|video):[0-9a-f]{{16}}{MARK_CLOSE}"
    f"|{MARK_OPEN}[a-z]{{0,5}}(?::[0-9a-f]{{0,16}})?$"
    f"|^(?:[a-z]{{0,5}}:)?[0-9a-f]{{0,16}}{MARK_CLOSE}", re.MULTILINE)


def request_text(request: RoutingRequest, mode: TextMode, max_chars: int,
                 tail_chars: int = 0) -> str:
    """The text to classify for ``request`` (possibly empty): its first ``max_chars``
    characters, and its last ``tail_chars`` when it is longer than both."""
    if request.messages is not None:
        parts = _message_texts(request.messages, mode, max_chars, tail_chars)
    else:
        parts = [_prompt_text(request.prompt, max_chars, tail_chars)]
    text = clean_text("\n\n".join(p for p in parts if p), max_chars, tail_chars)
    if MARK_OPEN in text or MARK_CLOSE in text:
        text = _MEDIA_MARK.sub(" ", text).strip()
    return text


def clean_text(raw: str | bytes, max_chars: int, tail_chars: int = 0) -> str:
    """Valid, stripped Unicode: ``raw`` as it is when it has at most ``max_chars +
    tail_chars`` characters, otherwise its first ``max_chars`` and (``tail_chars`` > 0) its
    last ``tail_chars``, joined by a line break."""
    if tail_chars <= 0:
        return _valid(raw, max_chars)
    if len(raw) <= max_chars + tail_chars:
        return _valid(raw, max_chars + tail_chars)
    head = _valid(raw[: max_chars * 4] if isinstance(raw, bytes) else raw, max_chars)
    tail = _valid(raw[-tail_chars * 4:] if isinstance(raw, bytes) else raw[-tail_chars:],
                  tail_chars, from_end=True)
    return f"{head}\n{tail}".strip()


def _valid(raw: str | bytes, max_chars: int, from_end: bool = False) -> str:
    """Valid, stripped Unicode of at most ``max_chars`` characters (the last ones when
    ``from_end``)."""
    if isinstance(raw, bytes):
        text = (raw[-max_chars * 4:] if from_end else raw[: max_chars * 4]).decode(
            "utf-8", errors="replace")
    else:
        text = raw[-max_chars:] if from_end else raw[:max_chars]
        if not text.isascii():
            text = text.encode("utf-8", errors="replace").decode("utf-8", errors="replace")
    return (text[-max_chars:] if from_end else text[:max_chars]).strip()


def _message_texts(messages: Sequence[Any], mode: TextMode, max_chars: int,
                   tail_chars: int) -> list[str]:
    valid = [m for m in messages if isinstance(m, Mapping)]
    user = [m for m in valid if m.get("role") == "user"]
    if mode == "all-user":
        return [_content_text(m.get("content"), max_chars, tail_chars) for m in user]
    last = [_content_text(user[-1].get("content"), max_chars, tail_chars)] if user else []
    if mode == "system+last-user":
        system = [_content_text(m.get("content"), max_chars, tail_chars)
                  for m in valid if m.get("role") in ("system", "developer")]
        return system + last
    return last


def _content_text(content: Any, max_chars: int, tail_chars: int) -> str:
    """Text of one message's content: a string or a list of typed parts (the first parts up
    to ``max_chars``, and the last ones up to ``tail_chars``)."""
    if isinstance(content, (str, bytes)):
        return clean_text(content, max_chars, tail_chars)
    if not isinstance(content, list):
        return ""
    head, used = _part_texts(content, max_chars)
    if tail_chars <= 0 or used == len(content):
        return "\n".join(head)
    tail, _ = _part_texts(islice(reversed(content), len(content) - used), tail_chars,
                          from_end=True)
    return "\n".join(head + tail[::-1])


def _part_texts(parts: Iterable[Any], budget: int,
                from_end: bool = False) -> tuple[list[str], int]:
    """The non-empty texts of ``parts`` in order until ``budget`` characters are spent, and
    how many parts were looked at."""
    texts: list[str] = []
    looked = 0
    for part in parts:
        if budget <= 0:
            break
        looked += 1
        if isinstance(part, Mapping) and part.get("type") == "text":
            text = part.get("text")
            if isinstance(text, (str, bytes)):
                cleaned = _valid(text, budget, from_end)
                if cleaned:
                    texts.append(cleaned)
                budget -= len(cleaned) + 1
    return texts, looked


def _prompt_text(prompt: Any, max_chars: int, tail_chars: int) -> str:
    """A completions prompt: a string, or the last string of a batch; token ids have no text."""
    if isinstance(prompt, (str, bytes)):
        return clean_text(prompt, max_chars, tail_chars)
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], (str, bytes)):
        return clean_text(prompt[-1], max_chars, tail_chars)
    return ""
