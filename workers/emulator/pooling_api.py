"""``POST /pooling`` of an emulated embedding model, as vLLM 0.32 answers it.

An embedding model's pooling task is ``embed``: each input's pooled output is its embedding,
the same unit vector ``/v1/embeddings`` answers (``workers.emulator.embeddings``, whose
inputs, engine requests and ``encoding_format`` it shares), as ``{"index", "object":
"pooling", "data"}`` under a ``pooling-`` id. A body is one of vLLM's three shapes: ``input``
(as embeddings take it), ``messages`` (one conversation) or an IO processor plugin's
``data``; none of them is every shape's pydantic errors, as vLLM lists them.
``encoding_format`` as embeddings take it, vLLM's binary answers included. What vLLM
refuses of an embedding model is refused in its words: ``dimensions``, a plugin request (no
plugin is installed), a ``task`` other than ``embed``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from workers.emulator.embeddings import (
    BINARY_FORMATS,
    binary_answer,
    check_engine,
    embedding_of,
    encoded,
    encoding_format,
    inputs,
    pooling_usage,
    run_pooling,
    served_model,
    tokenized,
    truncation,
)
from workers.emulator.errors import FieldError, bad_request, validation_errors
from workers.emulator.protocol import body_request_id, read_json_body
from workers.emulator.state import WORKER

POOLING_PATH = "/pooling"
# an embedding model's (vLLM lists them from a set: in either order, from start to start)
SUPPORTED_TASKS = ("embed", "token_embed")
NO_PLUGIN = ("No IOProcessor plugin installed. Please refer to the documentation and to the "
             "'prithvi_geospatial_mae_io_processor' offline inference example for more "
             "details. (parameter=task)")


async def pooling(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    data = await read_json_body(request)
    _check_shape(data)
    model = served_model(worker, data)
    _check_task(data)
    encoding = encoding_format(data)
    check_engine(worker)
    prompts = await tokenized(worker, inputs(data), truncation(worker, data))
    request_id = worker.new_request_id("pooling", request, body_request_id(data))
    await run_pooling(worker, request_id, prompts)
    hidden = worker.config.model.hidden
    vectors = [embedding_of(tokens, hidden, hidden) for tokens in prompts]
    if encoding in BINARY_FORMATS:
        return binary_answer(data, encoding, request_id, model, vectors, prompts)
    body = {"id": request_id, "object": "list", "created": int(time.time()), "model": model,
            "data": [{"index": i, "object": "pooling", "data": encoded(vector, encoding)}
                     for i, vector in enumerate(vectors)],
            "usage": pooling_usage(prompts)}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _check_shape(data: Mapping[str, Any]) -> None:
    """The body fits one of vLLM's pooling request types, else their errors (pydantic's)."""
    input_errors = _input_errors(data)
    messages_errors = _messages_errors(data)
    if not input_errors or not messages_errors or "data" in data:
        return
    raise validation_errors([*input_errors, *messages_errors,
                             ("data", "Field required", "missing", data, None)])


def _input_errors(data: Mapping[str, Any]) -> list[FieldError]:
    """``input``'s errors: ``list[int] | list[list[int]] | str | list[str]``."""
    if "input" not in data:
        return [("input", "Field required", "missing", data, None)]
    value = data["input"]
    if isinstance(value, str) or (isinstance(value, list) and (
            _all_ints(value) or all(isinstance(item, str) for item in value)
            or all(isinstance(item, list) and _all_ints(item) for item in value))):
        return []
    as_list = ("input", "Input should be a valid list", "list_type", value, None)
    return [as_list, as_list, ("input", "Input should be a valid string", "string_type", value,
                               None), as_list]


def _messages_errors(data: Mapping[str, Any]) -> list[FieldError]:
    if "messages" not in data:
        return [("messages", "Field required", "missing", data, None)]
    value = data["messages"]
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        return []
    return [("messages", "Input should be a valid list", "list_type", value, None)]


def _all_ints(values: list[Any]) -> bool:
    return all(type(value) is int for value in values)


def _check_task(data: Mapping[str, Any]) -> None:
    """What vLLM's pooling API refuses of an embedding model, in its order and words."""
    if data.get("dimensions") is not None:
        raise bad_request("dimensions is currently not supported (parameter=dimensions)",
                          "dimensions")
    if "input" not in data and "messages" not in data:      # an IO processor plugin's body
        raise bad_request(NO_PLUGIN, "task")
    task = data.get("task")
    if task is None or task == SUPPORTED_TASKS[0]:
        return
    if task in SUPPORTED_TASKS:
        raise bad_request(f"Try switching the model's pooling_task via --pooler-config.task "
                          f"{task}. (parameter=task)", "task")
    raise bad_request(f"Unsupported task: {task!r} Supported tasks: {list(SUPPORTED_TASKS)} "
                      "(parameter=task)", "task")
