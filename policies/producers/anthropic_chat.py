"""An Anthropic Messages API turn as the OpenAI chat messages vLLM renders for it.

vLLM serves ``/v1/messages`` by converting the turn to a chat request
(``vllm/entrypoints/anthropic/serving.py``) and rendering that; the router counts and hashes
the same messages, and the emulated worker serves them, so all three see one prompt:

* ``system`` (a string, or text blocks joined with nothing) is the first, system message;
  a text block starting ``x-anthropic-billing-header`` is left out (a per-request hash that
  would defeat prefix caching), as are system messages inside ``messages`` left with none;
* a message's string content stays as it is; its blocks become content parts (``text``),
  ``tool_calls`` (``tool_use``: its ``input`` as JSON arguments) and, in a user message, one
  ``tool`` message per ``tool_result`` (its text, the text items of a list joined with line
  breaks) put before the message; a user message left with no content is dropped. A
  ``tool_result`` in an assistant message is a text part, ``Tool result: …``;
* a single text part is the message's content; several are a list of parts, which the
  template joins with line breaks (``chat_template.message_text``).

``tools`` become chat tools (``chat_tools``), which the template writes into the prompt.
An image block is a content part in its place, counted as an image
(``policies.producers.media``); thinking and other blocks add no text here. Nothing
raises: the caller validates the shapes it refuses (the router's ``protocol``, the
emulator's ``messages_api``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from policies.producers.chat_template import json_text

BILLING_HEADER = "x-anthropic-billing-header"


def chat_messages(system: Any, messages: Sequence[Any]) -> list[dict[str, Any]]:
    """The chat messages vLLM builds from ``system`` and ``messages``."""
    out: list[dict[str, Any]] = []
    text = system_text(system)
    if text:
        out.append({"role": "system", "content": text})
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        role, content = message.get("role"), message.get("content")
        if role == "system":
            text = system_text(content)
            if text:
                out.append({"role": "system", "content": text})
            continue
        converted: dict[str, Any] = {"role": role}
        if isinstance(content, str):
            converted["content"] = content
        elif isinstance(content, list):
            _convert_blocks(content, role, converted, out)
        if not (role == "user" and "content" not in converted):
            out.append(converted)
    return out


def chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Anthropic's tool definitions as the chat tools vLLM hands the template: a function
    each, its ``input_schema`` as the parameters (None when there are none)."""
    if not isinstance(tools, list) or not tools:
        return None
    return [{"type": "function", "function": {
                "name": tool.get("name"), "description": tool.get("description"),
                "parameters": tool.get("input_schema")}}
            for tool in tools if isinstance(tool, Mapping)] or None


def system_text(system: Any) -> str:
    """A system prompt's text: the string, or its text blocks joined (billing headers out)."""
    if isinstance(system, str):
        return "" if system.startswith(BILLING_HEADER) else system
    if not isinstance(system, list):
        return ""
    return "".join(block["text"] for block in system
                   if isinstance(block, Mapping) and block.get("type") == "text"
                   and isinstance(block.get("text"), str) and block["text"]
                   and not block["text"].startswith(BILLING_HEADER))


def _convert_blocks(blocks: list[Any], role: Any, converted: dict[str, Any],
                    out: list[dict[str, Any]]) -> None:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":      # its place and its source (``policies.producers.media``)
            parts.append({"type": "image", "source": block.get("source")})
        elif kind == "tool_use":
            calls.append({"id": block.get("id") or "", "type": "function", "function": {
                "name": block.get("name") or "",
                "arguments": json_text(block.get("input") or {})}})
        elif kind == "tool_result":
            if role == "user":
                out.append({"role": "tool", "tool_call_id": block.get("tool_use_id") or "",
                            "content": _tool_result_text(block.get("content"))})
            else:
                result = block.get("content")
                parts.append({"type": "text",
                              "text": f"Tool result: {str(result) if result else ''}"})
    if calls:
        converted["tool_calls"] = calls
    if parts:
        converted["content"] = (parts[0]["text"] if len(parts) == 1 and "text" in parts[0]
                                else parts)


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(item.get("text", "") if isinstance(item.get("text", ""), str) else ""
                         for item in content
                         if isinstance(item, Mapping) and item.get("type") == "text")
    return ""
