"""Render OpenAI chat messages to the one prompt text that the router tokenizes.

One fixed, Llama-3-style template, used by the router's token producer and by the emulated
worker, so that both count the same tokens and hash the same blocks::

    <|begin_of_text|>
    <|start_header_id|>{role}<|end_header_id|>\\n\\n{content}<|eot_id|>     (per message)
    <|start_header_id|>assistant<|end_header_id|>\\n\\n                    (generation prompt)

``content`` may be a string, ``None`` (e.g. a tool-call message: empty), or a list of
content parts, of which the text parts (``text``, ``input_text``, ``output_text``,
``refusal``) are joined with ``\\n``, each image, audio or video item standing as a mark
that the tokenizers turn into its run of tokens (``policies.producers.media``); an assistant
message's ``tool_calls`` follow its content, each as Llama 3.1 writes one (``{"name": …,
"parameters": …}``), and the tools a request offers open its first user message, as Llama
3.1 writes them. A missing role renders as ``user``.
Nothing here raises on odd input: non-string values are rendered with ``str``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from policies.producers.media import media_mark, part_media

BEGIN_OF_TEXT = "<|begin_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
END_OF_TURN = "<|eot_id|>"


# what Llama 3.1's template writes before the tools, at the start of the first user message
TOOLS_PREAMBLE = (
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\n"
    'Respond in the format {"name": function name, "parameters": dictionary of argument name '
    'and its value}.Do not use variables.\n\n')


ToolsWriter = Callable[[Sequence[Any]], str]


def render_chat(messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                tools: Sequence[Any] | None = None,
                tools_text: ToolsWriter | None = None) -> str:
    """The prompt text for ``messages``, ending with the assistant header by default; the
    ``tools`` a chat request offers are written as Llama 3.1's template writes them, at the
    start of the first user message (``TOOLS_PREAMBLE``, then each one's JSON), by
    ``tools_text`` when given (``ToolsTextCache``), else ``write_tools``."""
    if tools:
        messages = _with_tools(messages, (write_tools if tools_text is None else tools_text)(tools))
    parts = [BEGIN_OF_TEXT]
    for message in messages:
        role = message.get("role") if isinstance(message, Mapping) else None
        content = message.get("content") if isinstance(message, Mapping) else message
        calls = message.get("tool_calls") if isinstance(message, Mapping) else None
        parts.append(f"{START_HEADER}{part_text(role) or 'user'}{END_HEADER}\n\n"
                     f"{message_text(content)}{tool_calls_text(calls)}{END_OF_TURN}")
    if add_generation_prompt:
        parts.append(f"{START_HEADER}assistant{END_HEADER}\n\n")
    return "".join(parts)


# the content parts vLLM reads as text (the Responses API's in chat messages too), and the
# field that holds it
TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text",
              "refusal": "refusal"}


def message_text(content: Any) -> str:
    """The text of one message's ``content`` (string, None or a list of content parts):
    its text parts, and a mark for each image, audio or video item
    (``policies.producers.media``), joined with line breaks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, Mapping):
                continue
            field = TEXT_PARTS.get(part.get("type", "text"))
            if field is not None:
                texts.append(part_text(part.get(field)))
                continue
            media = part_media(part)
            if media is not None:
                texts.append(media_mark(*media))
        return "\n".join(texts)
    return part_text(content)


def write_tools(tools: Sequence[Any]) -> str:
    """The tools' text at the start of the first user message."""
    return TOOLS_PREAMBLE + "".join(json_text(tool, indent=4, ensure_ascii=False) + "\n\n"
                                    for tool in tools)


class ToolsTextCache:
    """``write_tools``, remembered by the tools' JSON: an agent sends the same tools with each
    turn, and writing them as the template does (``json.dumps`` with an indent, pure Python)
    took 2.2 ms of a request's 2.3 ms in the tokens producer for 30 tools. Texts of at most
    ``max_chars`` are kept, the ``max_entries`` used last (so one tenant's new sets of tools
    do not push out the sets every other agent sends). Safe to call from several threads."""

    __slots__ = ("_lock", "_texts", "max_chars", "max_entries")

    def __init__(self, max_entries: int = 256, max_chars: int = 1 << 18) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._texts: OrderedDict[bytes, str] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, tools: Sequence[Any]) -> str:
        try:
            key = hashlib.sha1(orjson.dumps(tools), usedforsecurity=False).digest()
        except (orjson.JSONEncodeError, TypeError):   # an integer past 64 bits, say
            return write_tools(tools)
        with self._lock:
            text = self._texts.get(key)
            if text is not None:
                self._texts.move_to_end(key)
                return text
        text = write_tools(tools)            # outside the lock: milliseconds for many tools
        if len(text) <= self.max_chars:
            with self._lock:
                self._texts[key] = text
                while len(self._texts) > self.max_entries:
                    self._texts.popitem(last=False)
        return text

    def __len__(self) -> int:
        return len(self._texts)


def _with_tools(messages: Sequence[Mapping[str, Any]], text: str) -> list[Mapping[str, Any]]:
    out = list(messages)
    for i, message in enumerate(out):
        if isinstance(message, Mapping) and message.get("role") == "user":
            out[i] = {**message, "content": text + message_text(message.get("content"))}
            return out
    return [*out, {"role": "user", "content": text}]


def json_text(value: Any, indent: int | None = None, ensure_ascii: bool = True) -> str:
    """``json.dumps(value)``, or ``{}`` for what it cannot write: nesting deeper than
    Python's recursion limit (a body may nest 1,024 levels), values that are not JSON.
    ``ensure_ascii=False`` writes text as it is, as a chat template's ``tojson`` does
    (transformers'), where ``json.dumps`` escapes every non-ASCII character."""
    try:
        return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)
    except (RecursionError, TypeError, ValueError):
        return "{}"


def tool_call_arguments(arguments: Any) -> Any:
    """A tool call's arguments as vLLM hands them to a chat template: the JSON text a client
    sends parsed into its object (nothing: ``{}``); text that does not parse is kept as it
    is (vLLM refuses it)."""
    if isinstance(arguments, (dict, list)):
        return arguments
    if not arguments:
        return {}
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except (RecursionError, ValueError):
            return arguments
    return arguments


def tool_calls_text(calls: Any) -> str:
    """An assistant message's tool calls as Llama 3.1 writes them, one JSON object each:
    ``{"name": NAME, "parameters": ARGUMENTS}``, the arguments parsed and written by the
    template's ``tojson`` (characters as they are)."""
    if not isinstance(calls, list):
        return ""
    texts = []
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            arguments = tool_call_arguments(function.get("arguments"))
            written = (arguments if isinstance(arguments, str)
                       else json_text(arguments, ensure_ascii=False))
            texts.append(f'{{"name": "{part_text(function.get("name"))}", '
                         f'"parameters": {written}}}')
    return "".join(texts)


def part_text(value: Any) -> str:
    """A text field's text: a string as it is, a number as written; nothing for None or a
    container (not text to a worker, and a deeply nested one has no ``str``)."""
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, (int, float)) else ""
