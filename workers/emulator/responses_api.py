"""OpenAI's Responses API as vLLM 0.32 serves it: ``POST /v1/responses`` (whole or streamed),
``GET /v1/responses/{id}`` and ``POST /v1/responses/{id}/cancel``.

A response is one chat turn run through the same engine path as ``/v1/chat/completions``:
``instructions`` become the system message, ``input`` (a string, or message items with text
content) the user turn. The id is the body's ``request_id`` when given, else ``resp_`` and 16
hex digits (vLLM ignores ``X-Request-Id`` here).

As in vLLM, answers are kept only when the server keeps them (``responses_store``, vLLM's
``VLLM_ENABLE_RESPONSES_API_STORE``; off by default, and then ``store`` is silently ignored).
A kept response can be read back and continued with ``previous_response_id`` (its
conversation and answer come before the new input) on *this* server only: another one
answers 404 ``Response with id '...' not found.``, which is why a router must send
follow-ups to the worker that made the response. Background mode is not emulated (a 400).

Bodies and stream events carry vLLM 0.32's keys in its order: ``response.created``,
``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``,
one ``response.output_text.delta`` per engine step, ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done``, ``response.completed`` (also
when cut by ``max_output_tokens``: status ``incomplete``); no ``[DONE]``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from workers.emulator.errors import ApiError, bad_request, no_room_to_answer, validation_error
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
from workers.emulator.protocol import SSE_HEADERS, BodyFields, GenerationBody, read_json_body
from workers.emulator.state import WORKER, WorkerState


def not_found(response_id: str) -> ApiError:
    return ApiError(404, f"Response with id '{response_id}' not found.",
                    "invalid_request_error", "response_id")


async def create_response(request: web.Request) -> web.StreamResponse:
    worker = request.app[WORKER]
    data = await read_json_body(request)
    fields = BodyFields(data)
    model, _ = worker.resolve_model(fields.opt_str("model"))
    stream = fields.boolean("stream", False)
    store = fields.boolean("store", True) and worker.config.responses_store
    if fields.boolean("background", False):
        if not worker.config.responses_store:
            raise bad_request("This vLLM engine does not support `store=True` and therefore "
                              "does not support the background mode. To enable these "
                              "features, set the environment variable "
                              "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM "
                              "server.", "background")
        raise bad_request("background: the emulator does not run background responses",
                          "background")
    response_id = fields.opt_str("request_id") or f"resp_{secrets.token_hex(8)}"
    previous_id = fields.opt_str("previous_response_id")
    instructions = fields.opt_str("instructions")
    max_output = fields.opt_int("max_output_tokens")
    if max_output is not None and max_output < 1:      # vLLM's sampling parameters' words
        raise no_room_to_answer(max_output)
    for name in ("temperature", "top_p"):       # echoed in the response body as floats
        fields.opt_number(name)
    history: list[dict[str, Any]] = []
    if previous_id is not None:
        kept = worker.stored_responses.get(previous_id) if worker.config.responses_store else None
        if kept is None:
            raise not_found(previous_id)
        conversation, answer = kept
        history = [m for m in conversation if m["role"] != "system"]
        history.append({"role": "assistant", "content": _output_text(answer)})
    messages = ([{"role": "system", "content": instructions}] if instructions else [])
    messages += history + _input_messages(data.get("input"))
    check_serving(worker)
    body = GenerationBody(kind="chat", model=model, prompts=(), messages=tuple(messages),
                          add_generation_prompt=True, max_tokens=max_output, ignore_eos=False,
                          n=1, stream=stream, include_usage=False, continuous_usage=False,
                          cache_salt=None, echo=False)
    check_max_tokens(worker, max_output, "max_output_tokens")
    prompts, texts = await tokenize_body(worker, body)
    max_tokens = check_lengths(worker, prompts, max_output)
    admitted = admit(worker, response_id, body, prompts, texts, max_tokens, None)
    turn = _Turn(response_id, model, data, instructions, previous_id, max_output,
                 f"msg_{secrets.token_hex(8)}")
    worker.server_load += 1
    try:
        if stream:
            return await _stream(request, worker, turn, admitted, messages, store)
        answer = await _whole(worker, turn, admitted)
        if store:
            worker.stored_responses[response_id] = (messages, answer)
        return web.Response(body=orjson.dumps(answer), content_type="application/json")
    finally:
        worker.server_load -= 1
        for engine_id in admitted.by_request:
            worker.runner.abort(engine_id)


async def retrieve_response(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    kept = worker.stored_responses.get(request.match_info["response_id"])
    if kept is None:
        raise not_found(request.match_info["response_id"])
    return web.Response(body=orjson.dumps(kept[1]), content_type="application/json")


async def cancel_response(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    if request.match_info["response_id"] not in worker.stored_responses:
        raise not_found(request.match_info["response_id"])
    raise ApiError(400, "Cannot cancel a synchronous response.", "invalid_request_error",
                   "response_id")


class _Turn:
    """What the body and every event of one response share."""

    __slots__ = ("created", "data", "id", "instructions", "item_id", "max_output", "model",
                 "previous_id")

    def __init__(self, response_id: str, model: str, data: Mapping[str, Any],
                 instructions: str | None, previous_id: str | None, max_output: int | None,
                 item_id: str) -> None:
        self.id, self.model, self.data = response_id, model, data
        self.instructions, self.previous_id, self.max_output = (instructions, previous_id,
                                                                max_output)
        self.item_id = item_id
        self.created = int(time.time())

    def body(self, status: str, output: list[dict[str, Any]],
             usage: dict[str, Any] | None) -> dict[str, Any]:
        number = self.data.get
        return {
            "id": self.id, "created_at": self.created,
            "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete"
                                   else None),
            "instructions": self.instructions, "metadata": self.data.get("metadata"),
            "model": self.model, "object": "response", "output": output,
            "parallel_tool_calls": True, "temperature": float(number("temperature") or 1.0),
            "tool_choice": "none", "tools": [], "top_p": float(number("top_p") or 1.0),
            "background": False, "max_output_tokens": self.max_output, "max_tool_calls": None,
            "previous_response_id": self.previous_id, "prompt": None, "reasoning": None,
            "service_tier": "auto", "status": status, "text": None, "top_logprobs": None,
            "truncation": "disabled", "usage": usage, "user": None, "presence_penalty": 0.0,
            "frequency_penalty": 0.0, "kv_transfer_params": None, "ec_transfer_params": None,
            "input_messages": None, "output_messages": None,
        }

    def item(self, text: str | None) -> dict[str, Any]:
        content = [] if text is None else [_part(text, None)]
        return {"id": self.item_id, "content": content, "role": "assistant",
                "status": "in_progress" if text is None else "completed", "type": "message",
                "phase": None}


def _part(text: str, logprobs: list[Any] | None) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": logprobs}


def _usage(prompt: int, cached: int, output: int) -> dict[str, Any]:
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0,
                                     "input_tokens_per_turn": [], "cached_tokens_per_turn": []},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0,
                                      "output_tokens_per_turn": [],
                                      "tool_output_tokens_per_turn": []},
            "total_tokens": prompt + output}


def _output_text(answer: Mapping[str, Any]) -> str:
    return "".join(part.get("text", "") for item in answer.get("output", [])
                   for part in item.get("content", []))


def _finished(turn: _Turn, admitted: Admitted, text: str) -> dict[str, Any]:
    """The response once its one choice has finished."""
    choice: ChoiceState = next(iter(admitted.by_request.values()))
    status = "incomplete" if choice.finish_reason == "length" else "completed"
    return turn.body(status, [turn.item(text)],
                     _usage(admitted.prompt_lens[0], choice.cached_tokens, choice.num_tokens))


async def _whole(worker: WorkerState, turn: _Turn, admitted: Admitted) -> dict[str, Any]:
    text = "".join([delta async for delta in text_deltas(worker, admitted)])
    return _finished(turn, admitted, text)


async def _stream(request: web.Request, worker: WorkerState, turn: _Turn, admitted: Admitted,
                  messages: list[dict[str, Any]], store: bool) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    events = _Events(response)
    await events.send("response.created", {"response": turn.body("in_progress", [], None)})
    await events.send("response.in_progress", {"response": turn.body("in_progress", [], None)})
    await events.send("response.output_item.added", {"item": turn.item(None), "output_index": 0})
    await events.send("response.content_part.added", {
        "content_index": 0, "item_id": turn.item_id, "output_index": 0, "part": _part("", [])})
    texts: list[str] = []
    async for delta in text_deltas(worker, admitted):
        texts.append(delta)
        await events.send("response.output_text.delta", {
            "content_index": 0, "delta": delta, "item_id": turn.item_id, "logprobs": [],
            "output_index": 0})
    text = "".join(texts)
    await events.send("response.output_text.done", {
        "content_index": 0, "item_id": turn.item_id, "logprobs": [], "output_index": 0,
        "text": text})
    await events.send("response.content_part.done", {
        "content_index": 0, "item_id": turn.item_id, "output_index": 0,
        "part": _part(text, None)})
    await events.send("response.output_item.done", {"item": turn.item(text), "output_index": 0})
    answer = _finished(turn, admitted, text)
    if store:
        worker.stored_responses[turn.id] = (messages, answer)
    await events.send("response.completed", {"response": answer})
    await response.write_eof()
    return response


class _Events:
    """``event: TYPE`` / ``data: {...}`` pairs, numbered from 0 (``sequence_number``)."""

    __slots__ = ("_next", "_response")

    def __init__(self, response: web.StreamResponse) -> None:
        self._response = response
        self._next = 0

    async def send(self, kind: str, payload: dict[str, Any]) -> None:
        payload["sequence_number"] = self._next
        payload["type"] = kind
        self._next += 1
        await self._response.write(b"event: " + kind.encode() + b"\ndata: "
                                   + orjson.dumps(payload) + b"\n\n")


def _input_messages(raw: Any) -> list[dict[str, Any]]:
    """The new turn's messages: a string is one user message; items need a role and text."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise validation_error("input", "Input should be a valid string or a list of items",
                               "union_type", raw)
    messages = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            raise bad_request(f"input[{i}]: the emulator takes message items (role and "
                              "content) only", "input")
        content = item.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content
                              if isinstance(part, dict) and isinstance(part.get("text"), str))
        if not isinstance(content, str):
            raise bad_request(f"input[{i}].content: must be text or text parts", "input")
        messages.append({"role": item["role"], "content": content})
    return messages
