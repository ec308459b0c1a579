"""The text of a request that decides its semantic class.

Modes (``semantic.text`` in routing.yaml):

* ``last-user`` (default): the last user message (a completions prompt counts as one);
* ``all-user``: every user message, oldest first, joined by blank lines;
* ``system+last-user``: the system message(s) followed by the last user message.

Only text is read: image parts, audio parts, tool calls and tool results are skipped, token-id
prompts have no text. Invalid Unicode (lone surrogates, undecodable bytes) is replaced, and
the result is cut to ``max_chars`` so that a 1 MB prompt costs no more than a short one; the
embedder then truncates to its token window. An empty result means "no evidence": the
classifier answers the default class without embedding anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from policies.base import RoutingRequest

TextMode = Literal["last-user", "all-user", "system+last-user"]


def request_text(request: RoutingRequest, mode: TextMode, max_chars: int) -> str:
    """The text to classify for ``request`` (possibly empty), at most ``max_chars`` long."""
    if request.messages is not None:
        parts = _message_texts(request.messages, mode, max_chars)
    else:
        parts = [_prompt_text(request.prompt, max_chars)]
    return clean_text("\n\n".join(p for p in parts if p), max_chars)


def clean_text(raw: str | bytes, max_chars: int) -> str:
    """Valid, stripped Unicode of at most ``max_chars`` characters."""
    if isinstance(raw, bytes):
        text = raw[: max_chars * 4].decode("utf-8", errors="replace")
    else:
        text = raw[:max_chars]
        if not text.isascii():
            text = text.encode("utf-8", errors="replace").decode("utf-8", errors="replace")
    return text[:max_chars].strip()


def _message_texts(messages: Sequence[Any], mode: TextMode, max_chars: int) -> list[str]:
    valid = [m for m in messages if isinstance(m, Mapping)]
    user = [m for m in valid if m.get("role") == "user"]
    if mode == "all-user":
        return [_content_text(m.get("content"), max_chars) for m in user]
    last = [_content_text(user[-1].get("content"), max_chars)] if user else []
    if mode == "system+last-user":
        system = [_content_text(m.get("content"), max_chars)
                  for m in valid if m.get("role") in ("system", "developer")]
        return system + last
    return last


def _content_text(content: Any, max_chars: int) -> str:
    """Text of one message's content: a string or a list of typed parts."""
    if isinstance(content, (str, bytes)):
        return clean_text(content, max_chars)
    if not isinstance(content, list):
        return ""
    texts: list[str] = []
    budget = max_chars
    for part in content:
        if budget <= 0:
            break
        if isinstance(part, Mapping) and part.get("type") == "text":
            text = part.get("text")
            if isinstance(text, (str, bytes)):
                cleaned = clean_text(text, budget)
                texts.append(cleaned)
                budget -= len(cleaned) + 1
    return "\n".join(t for t in texts if t)


def _prompt_text(prompt: Any, max_chars: int) -> str:
    """A completions prompt: a string, or the last string of a batch; token ids have no text."""
    if isinstance(prompt, (str, bytes)):
        return clean_text(prompt, max_chars)
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], (str, bytes)):
        return clean_text(prompt[-1], max_chars)
    return ""
