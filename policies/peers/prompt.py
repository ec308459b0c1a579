"""What a peer router keys its affinity on: the request's prompt as text or as units.

Peers differ here and the difference matters: SGLang's HTTP router and production-stack match
on characters, SGLang's gRPC path, llm-d and Dynamo on token ids. ``prompt_units`` returns the
token ids when a producer has set them and otherwise the prompt's characters as code points,
so a character-keyed peer still works on a bare request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from policies.base import RoutingRequest
from policies.producers.chat_template import part_text


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):   # OpenAI content parts: [{"type": "text", "text": ...}]
        return "".join(part_text(part.get("text")) for part in content
                       if isinstance(part, Mapping))
    return ""


def prompt_text(request: RoutingRequest, separator: str = "\n") -> str:
    """The prompt as text: chat message contents joined by ``separator``, or the prompt."""
    if request.messages is not None:
        return separator.join(_content_text(message.get("content"))
                              for message in request.messages)
    prompt = request.prompt
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence) and prompt and all(isinstance(p, str) for p in prompt):
        return separator.join(prompt)
    return ""


def prompt_units(request: RoutingRequest) -> Sequence[int]:
    """Token ids when produced (or given as a token-id prompt), else the text's code points."""
    if request.prompt_token_ids is not None:
        return request.prompt_token_ids
    prompt = request.prompt
    if isinstance(prompt, Sequence) and prompt and all(isinstance(p, int) for p in prompt):
        return list(prompt)
    return [ord(ch) for ch in prompt_text(request)]
