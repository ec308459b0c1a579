"""Anthropic's Messages API as vLLM 0.32 serves it: ``POST /v1/messages`` (whole or streamed)
and ``POST /v1/messages/count_tokens``.

vLLM turns a Messages request into a chat completion (``system`` first, then the messages)
and its answer back into Anthropic's shapes, so here a message is one chat turn through the
same engine path as ``/v1/chat/completions``; its id is the chat completion's
(``chatcmpl-`` and the ``X-Request-Id``, else 16 hex digits). Content is a string, or
``text``, ``tool_use`` and ``tool_result`` blocks, converted to chat messages as vLLM does
(``policies.producers.anthropic_chat``: tool results count in the prompt); other blocks
(images) are refused, a limit of the emulator.

Bodies and events carry vLLM 0.32's keys in its order. A stream is ``message_start`` (the
prompt's usage), ``content_block_start``, one ``content_block_delta`` per engine step,
``content_block_stop``, ``message_delta`` (stop reason and usage) and ``message_stop``. The
errors vLLM translates (an unknown model, an over-long prompt, an engine failure) take
Anthropic's shape, ``{"type": "error", "error": {"type", "message"}}`` with vLLM's error type;
a body that fails validation gets vLLM's usual (OpenAI-shaped) 400, as there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import orjson
from aiohttp import web

from policies.producers.anthropic_chat import chat_messages as anthropic_chat_messages
from policies.producers.anthropic_chat import chat_tools
from workers.emulator.errors import ApiError, bad_request, validation_error
from workers.emulator.generation import (
    Admitted,
    ChoiceState,
    admit,
    check_lengths,
    check_max_tokens,
    check_serving,
    text_deltas,
    tokenize_body,
)
from workers.emulator.protocol import (
    SSE_HEADERS,
    GenerationBody,
    check_sampling_ranges,
    read_json_body,
)
from workers.emulator.state import WORKER, WorkerState

# vLLM's stop reasons by the chat completion's finish reason
_STOP_REASONS = {"length": "max_tokens"}


class AnthropicApiError(ApiError):
    """An error of the Messages API, in Anthropic's shape (vLLM's ``translate_error_response``)."""

    def body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": self.err_type, "message": self.message}}

    @classmethod
    def of(cls, error: ApiError) -> ApiError:
        """``error`` as vLLM's Messages API answers it: validation errors keep their shape."""
        if error.err_type == "Bad Request" or isinstance(error, AnthropicApiError):
            return error
        return cls(error.status, error.message, error.err_type, error.param)


def _anthropic_errors(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as error:
            raise AnthropicApiError.of(error) from None
    return wrapped


@_anthropic_errors
async def create_message(request: web.Request) -> web.StreamResponse:
    worker = request.app[WORKER]
    data = await read_json_body(request)
    model_name = _required(data, "model", str)
    max_tokens = _required(data, "max_tokens", int)
    if max_tokens <= 0:         # vLLM's AnthropicMessagesRequest validator
        raise validation_error("max_tokens", "Value error, max_tokens must be positive",
                               "value_error", data["max_tokens"],
                               {"error": ValueError("max_tokens must be positive")})
    stream = data.get("stream") is True
    messages = chat_messages(data)
    stop = data.get("stop_sequences")
    if stop is not None and not (isinstance(stop, list)
                                 and all(isinstance(s, str) for s in stop)):
        raise validation_error("stop_sequences", "Input should be a valid list", "list_type",
                               stop)
    check_sampling_ranges(data)
    model, _ = worker.resolve_model(model_name)
    check_serving(worker)
    body = GenerationBody(kind="chat", model=model, prompts=(), messages=tuple(messages),
                          add_generation_prompt=True, max_tokens=max_tokens, ignore_eos=False,
                          n=1, stream=stream, include_usage=stream, continuous_usage=stream,
                          cache_salt=None, echo=False,
                          tools=tuple(chat_tools(data.get("tools")) or ()))
    check_max_tokens(worker, max_tokens, "max_completion_tokens")    # vLLM's chat field
    prompts, texts = await tokenize_body(worker, body)
    allowed = check_lengths(worker, prompts, max_tokens)
    message_id = worker.new_request_id("chatcmpl", request)
    admitted = admit(worker, message_id, body, prompts, texts, allowed, None)
    worker.server_load += 1
    try:
        if stream:
            return await _stream(request, worker, message_id, model, admitted)
        return web.Response(body=orjson.dumps(await _whole(worker, message_id, model, admitted)),
                            content_type="application/json")
    finally:
        worker.server_load -= 1
        for engine_id in admitted.by_request:
            worker.runner.abort(engine_id)


@_anthropic_errors
async def count_tokens(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    data = await read_json_body(request)
    model_name = _required(data, "model", str)
    worker.resolve_model(model_name)
    body = GenerationBody(kind="chat", model=model_name, prompts=(),
                          messages=tuple(chat_messages(data)), add_generation_prompt=True,
                          max_tokens=None, ignore_eos=False, n=1, stream=False,
                          include_usage=False, continuous_usage=False, cache_salt=None,
                          echo=False, tools=tuple(chat_tools(data.get("tools")) or ()))
    prompts, _ = await tokenize_body(worker, body)
    count = len(prompts[0])
    return web.Response(body=orjson.dumps({"input_tokens": count, "context_management": {
        "original_input_tokens": count}}), content_type="application/json")


_T = TypeVar("_T", str, int)
_TYPE_ERRORS = {str: ("string_type", "Input should be a valid string"),
                int: ("int_type", "Input should be a valid integer")}


def _required(data: Mapping[str, Any], name: str, kind: type[_T]) -> _T:
    """A required field of ``kind`` (a bool is no int), else vLLM's validation error."""
    value = data.get(name)
    if kind is int and isinstance(value, float) and value.is_integer():
        return kind(value)         # pydantic's lax int takes a whole float, as vLLM does
    if isinstance(value, kind) and not isinstance(value, bool):
        return value
    if value is None:           # vLLM's input: the whole body
        raise validation_error(name, "Field required", "missing", dict(data))
    error_type, message = _TYPE_ERRORS[kind]
    raise validation_error(name, message, error_type, value)


def chat_messages(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``system`` and the messages as the chat messages vLLM renders for them
    (``policies.producers.anthropic_chat``), their shapes checked as vLLM's request model
    does."""
    system = data.get("system")
    if system is not None:
        _check_blocks(system, "system", _SYSTEM_BLOCKS)
    raw = data.get("messages")
    if not isinstance(raw, list):
        raise validation_error("messages", "Field required" if raw is None
                               else "Input should be a valid list",
                               "missing" if raw is None else "list_type",
                               dict(data) if raw is None else raw)
    for i, message in enumerate(raw):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant", "system"):
            raise validation_error(f"messages.{i}.role",
                                   "Input should be 'user', 'assistant' or 'system'",
                                   "literal_error", role)
        _check_blocks(message.get("content"), f"messages.{i}.content", _MESSAGE_BLOCKS)
    return anthropic_chat_messages(system, raw)


_SYSTEM_BLOCKS = frozenset({"text"})
_MESSAGE_BLOCKS = frozenset({"text", "tool_use", "tool_result"})


def _check_blocks(content: Any, where: str, kinds: frozenset[str]) -> None:
    """A string, or a list of blocks of ``kinds`` (a text block's ``text`` a string)."""
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise validation_error(where, "Input should be a valid string", "string_type", content)
    for block in content:
        if not isinstance(block, dict) or block.get("type") not in kinds:
            raise bad_request(f"{where}: the emulator takes {' and '.join(sorted(kinds))} "
                              "blocks only", where)
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            raise validation_error(f"{where}.text", "Input should be a valid string",
                                   "string_type", block.get("text"))


def _choice(admitted: Admitted) -> ChoiceState:
    return next(iter(admitted.by_request.values()))


def _usage(admitted: Admitted, output: int) -> dict[str, int]:
    return {"input_tokens": admitted.prompt_lens[0], "output_tokens": output}


async def _whole(worker: WorkerState, message_id: str, model: str,
                 admitted: Admitted) -> dict[str, Any]:
    text = "".join([delta async for delta in text_deltas(worker, admitted)])
    choice = _choice(admitted)
    return {"id": message_id, "type": "message", "role": "assistant",
            "content": [{"type": "text", "text": text}], "model": model,
            "stop_reason": _STOP_REASONS.get(choice.finish_reason or "", "end_turn"),
            "usage": _usage(admitted, choice.num_tokens)}


async def _stream(request: web.Request, worker: WorkerState, message_id: str, model: str,
                  admitted: Admitted) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)

    async def send(kind: str, payload: dict[str, Any]) -> None:
        await response.write(b"event: " + kind.encode() + b"\ndata: "
                             + orjson.dumps({"type": kind, **payload}) + b"\n\n")

    await send("message_start", {"message": {
        "id": message_id, "type": "message", "role": "assistant", "content": [], "model": model,
        "stop_reason": None, "stop_sequence": None, "usage": _usage(admitted, 0)}})
    await send("content_block_start", {"content_block": {"type": "text", "text": ""},
                                       "index": 0})
    async for delta in text_deltas(worker, admitted):
        if delta:
            await send("content_block_delta", {"delta": {"type": "text_delta", "text": delta},
                                               "index": 0})
    await send("content_block_stop", {"index": 0})
    choice = _choice(admitted)
    await send("message_delta", {
        "delta": {"stop_reason": _STOP_REASONS.get(choice.finish_reason or "", "end_turn"),
                  "stop_sequence": None},
        "usage": _usage(admitted, choice.num_tokens)})
    await send("message_stop", {})
    await response.write_eof()
    return response
