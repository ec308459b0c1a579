"""``POST /v1/embeddings`` of an emulated pooling model (vLLM ``--runner pooling``).

Each input is one engine request that ends after its prefill (the pooled output), so an
embedding takes the time its prompt's prefill takes on this GPU, batched with everything else
the engine runs. The vector is made from the token ids: the mean of a fixed pseudo-random unit
vector per token id, normalised; the same input always gives the same vector and inputs that
share tokens point the same way (inputs of more than ``LONG_PROMPT_CHARS`` characters in all
are tokenized off the event loop). ``dimensions`` keeps the first N values, normalised again, for a
model declared ``matryoshka`` (Qwen3-Embedding); any other refuses it, as vLLM does.

Inputs as vLLM 0.32 takes them: ``input`` a string, a list of strings, token ids or lists of
token ids, or chat messages (one conversation, or a list of them; also under ``messages``).
``encoding_format`` ``float`` (default) or ``base64`` (little-endian float32, what the OpenAI
SDK asks for by default), or vLLM's binary answers: ``bytes`` (the vectors' float32 bytes one
after the other, in the ``endianness`` asked, native by default, described by a JSON
``metadata`` header: ids, each vector's place and shape, the usage) and ``bytes_only`` (the
bytes alone). A binary answer in another ``embed_dtype`` is refused (the emulator's 400).

The same inputs, engine requests and vectors serve vLLM's other pooling APIs of an embedding
model: ``/pooling`` (``workers.emulator.pooling_api``) and the score and rerank APIs
(``workers.emulator.scoring``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Mapping, Sequence
from functools import lru_cache
from itertools import accumulate
from typing import Any, NoReturn

import numpy as np
import orjson
from aiohttp import web

from workers import lax_values
from workers.emulator.errors import (
    bad_request,
    internal_error,
    prompt_too_long,
    validation_error,
)
from workers.emulator.generation import LONG_PROMPT_CHARS, internal_id
from workers.emulator.protocol import body_request_id, read_json_body
from workers.emulator.runner import OutputQueue
from workers.emulator.state import WORKER, WorkerState
from workers.engine.api import EngineRequest
from workers.engine.profiles import ModelSpec

ENCODING_FORMATS = ("float", "base64", "bytes", "bytes_only")
BINARY_FORMATS = ("bytes", "bytes_only")
BYTE_ORDERS = {"native": "=", "little": "<", "big": ">"}      # vLLM's endianness, numpy's


async def embeddings(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    data = await read_json_body(request)
    model = served_model(worker, data)
    encoding = encoding_format(data)
    dimensions = _dimensions(data.get("dimensions"), worker.config.model, model)
    check_engine(worker)
    prompts = await tokenized(worker, inputs(data), truncation(worker, data))
    request_id = worker.new_request_id("embd", request, body_request_id(data))
    await run_pooling(worker, request_id, prompts)
    vectors = [embedding_of(tokens, dimensions, worker.config.model.hidden)
               for tokens in prompts]
    if encoding in BINARY_FORMATS:
        return binary_answer(data, encoding, request_id, model, vectors, prompts)
    body = {
        "id": request_id, "object": "list", "created": int(time.time()), "model": model,
        "data": [{"index": i, "object": "embedding", "embedding": encoded(vector, encoding)}
                 for i, vector in enumerate(vectors)],
        "usage": pooling_usage(prompts),
    }
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def served_model(worker: WorkerState, data: Mapping[str, Any]) -> str:
    """The model to answer with: the request's ``model`` (a string), else the served one."""
    model_field = data.get("model")
    if model_field is not None and not isinstance(model_field, str):
        raise validation_error("model", "Input should be a valid string", "string_type",
                               model_field)
    return worker.resolve_model(model_field)[0]


def encoding_format(data: Mapping[str, Any]) -> str:
    encoding = data.get("encoding_format", "float")
    if encoding not in ENCODING_FORMATS:
        raise bad_request(f"encoding_format: must be one of {', '.join(ENCODING_FORMATS)} "
                          f"(the emulator's), got {encoding!r}", "encoding_format")
    if encoding in BINARY_FORMATS:
        dtype = data.get("embed_dtype", "float32")
        if dtype != "float32":
            raise bad_request(f"embed_dtype: the emulator answers bytes in float32 only, got "
                              f"{dtype!r}", "embed_dtype")
        endianness = data.get("endianness", "native")
        if not isinstance(endianness, str) or endianness not in BYTE_ORDERS:
            raise bad_request(f"endianness: must be one of {', '.join(BYTE_ORDERS)}",
                              "endianness")
    return str(encoding)


def binary_answer(data: Mapping[str, Any], encoding: str, request_id: str, model: str,
                  vectors: Sequence[list[float]], prompts: Sequence[Sequence[int]]
                  ) -> web.Response:
    """vLLM's binary pooling answer: the vectors' float32 bytes one after the other, and
    (``bytes``, not ``bytes_only``) the ``metadata`` header saying where each one is."""
    endianness = str(data.get("endianness", "native"))
    dtype = np.dtype(BYTE_ORDERS[endianness] + "f4")
    chunks = [np.asarray(vector, dtype=dtype).tobytes() for vector in vectors]
    headers = {}
    if encoding == "bytes":
        ends = list(accumulate(map(len, chunks)))
        usage = pooling_usage(prompts)
        headers["metadata"] = json.dumps({    # as vLLM writes it: json.dumps, its spacing
            "id": request_id, "created": int(time.time()), "model": model,
            "data": [{"index": i, "embed_dtype": "float32", "endianness": endianness,
                      "start": end - len(chunk), "end": end, "shape": [len(vector)]}
                     for i, (chunk, end, vector) in enumerate(zip(chunks, ends, vectors,
                                                                  strict=True))],
            "usage": {"prompt_tokens": usage["prompt_tokens"],
                      "total_tokens": usage["total_tokens"]}})
    return web.Response(body=b"".join(chunks), headers=headers,
                        content_type="application/octet-stream")


def check_engine(worker: WorkerState) -> None:
    if not worker.runner.healthy:
        raise internal_error("EngineCore encountered an issue. See stack trace for the root cause.")


async def tokenized(worker: WorkerState,
                    items: list[str | list[int] | list[Mapping[str, Any]]],
                    cuts: Sequence[int | None] | int | None = None) -> list[list[int]]:
    """Each input's token ids (a 400 for one too long or empty); tokenized off the event
    loop when the texts are long. ``cuts``: the tokens each input is cut to (one for all, or
    one each; -1: the window; None: whole), as vLLM's ``truncate_prompt_tokens``."""
    each = list(cuts) if isinstance(cuts, Sequence) else [cuts] * len(items)
    if sum(len(item) for item in items if isinstance(item, str)) > LONG_PROMPT_CHARS:
        return await asyncio.get_running_loop().run_in_executor(   # off the event loop
            None, _all_token_ids, worker, items, each)
    return _all_token_ids(worker, items, each)


def truncation(worker: WorkerState, data: Mapping[str, Any],
               name: str = "truncate_prompt_tokens") -> int | None:
    """A request's cut (``name``) as vLLM reads and checks it (pydantic's lax integers):
    ``truncate_prompt_tokens`` from -1 (the window) up to the window; a score's
    ``max_tokens_per_query``/``_per_doc`` from 1 to below the window (0: whole); None when
    absent. vLLM's 400 for a cut past the window."""
    value = _lax_count(data.get(name))
    if value is None:
        return None
    limit = worker.max_model_len
    if name == "truncate_prompt_tokens":
        if value > limit:
            raise bad_request("truncate_prompt_tokens value is greater than max_model_len. "
                              "Please request a smaller truncation size.")
        return value
    if value < 0:
        raise bad_request(f"{name} must be a non-negative integer")
    if value >= limit:
        raise bad_request(f"{name} ({value}) must be less than max_model_len ({limit}).")
    return value or None


def _lax_count(value: Any) -> int | None:
    """``lax_int``'s integer, None for anything it refuses."""
    return lax_values.lax_int(value)


def lax_int(value: Any) -> int | tuple[str, str]:
    """``value`` as pydantic's lax ``int`` takes it (``workers.lax_values``), else its
    error's message and type."""
    taken = lax_values.lax_int(value)
    return taken if taken is not None else lax_values.lax_int_error(value)


def pooling_usage(prompts: Sequence[Sequence[int]]) -> dict[str, Any]:
    """vLLM's usage of a pooling answer: the prompts' tokens, none generated."""
    total = sum(len(tokens) for tokens in prompts)
    return {"prompt_tokens": total, "total_tokens": total, "completion_tokens": 0,
            "prompt_tokens_details": None, "completion_tokens_details": None}


async def run_pooling(worker: WorkerState, request_id: str,
                      prompts: Sequence[list[int]]) -> None:
    """Run each prompt as one engine request (``{request_id}-{random}-{i}``) that ends after its
    prefill, batched with everything else the engine runs; return when all have ended."""
    base = internal_id(request_id)             # unique whatever the client's id (vLLM's)
    ids = [f"{base}-{i}" for i in range(len(prompts))]
    queue: OutputQueue = asyncio.Queue()
    eos = worker.tokenizer.eos_token_id
    # the engine runs an embedding as a prefill and one token; vLLM embeds an input that
    # fills the whole window (it generates nothing), so such an input's last token is left
    # out of the prefill, one token in thousands of the timing
    window = worker.max_model_len
    for engine_id, tokens in zip(ids, prompts, strict=True):
        worker.runner.submit(EngineRequest(
            request_id=engine_id,
            prompt_token_ids=tokens if len(tokens) < window else tokens[:window - 1],
            output_token_ids=[eos], pooling=True,
            finish_reason="stop", arrival_time=worker.runner.now()), 0, queue)
    worker.server_load += 1
    try:
        remaining = len(ids)
        while remaining:
            output = await queue.get()
            if output is None:
                raise internal_error("EngineCore encountered an issue.")
            remaining -= output.finished
    finally:
        worker.server_load -= 1
        for engine_id in ids:
            worker.runner.abort(engine_id)


def _dimensions(raw: Any, spec: ModelSpec, model: str) -> int:
    if raw is None:
        return spec.hidden
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise validation_error("dimensions", "Input should be a valid integer", "int_type", raw)
    if not spec.matryoshka:          # vLLM 0.32's words
        raise bad_request(f"Model '{model}' does not support Matryoshka embeddings; dimensions "
                          f"must be unset (received dimensions={raw}).")
    if not 1 <= raw <= spec.hidden:
        raise bad_request(f"dimensions: must be between 1 and {spec.hidden} (the model's "
                          f"embedding size), got {raw}", "dimensions")
    return raw


def inputs(data: Mapping[str, Any]) -> list[str | list[int] | list[Mapping[str, Any]]]:
    """Each input to embed: a text, token ids, or one chat conversation."""
    messages = data.get("messages")
    raw = messages if messages is not None else data.get("input")
    if raw is None:
        raise validation_error("input", "Field required", "missing", data)
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw:
        if all(isinstance(item, str) for item in raw):
            return list(raw)
        if _is_token_ids(raw):
            return [list(raw)]
        if all(isinstance(item, list) and _is_token_ids(item) for item in raw):
            return [list(item) for item in raw]
        if _is_conversation(raw):
            return [raw]
        if all(isinstance(item, list) and _is_conversation(item) for item in raw):
            return [list(item) for item in raw]
    raise validation_error("input", "Input should be a string, a list of strings, token ids, "
                           "lists of token ids or chat messages", "union_type", raw)


def _is_token_ids(values: Sequence[Any]) -> bool:
    return bool(values) and all(type(v) is int for v in values)


def _is_conversation(values: Sequence[Any]) -> bool:
    return bool(values) and all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                for m in values)


def _all_token_ids(worker: WorkerState,
                   items: list[str | list[int] | list[Mapping[str, Any]]],
                   cuts: Sequence[int | None]) -> list[list[int]]:
    return [_token_ids(worker, item, cut) for item, cut in zip(items, cuts, strict=True)]


def _token_ids(worker: WorkerState, item: str | list[int] | list[Mapping[str, Any]],
               cut: int | None = None) -> list[int]:
    """An input's token ids, whole (a 400 past the window) or ``cut`` to its first tokens
    (-1: the window), as vLLM's ``truncate_prompt_tokens`` (only the head is tokenized)."""
    tok, limit = worker.tokenizer, worker.max_model_len
    keep = None if cut is None else (limit if cut < 0 else cut)
    if isinstance(item, str):
        if keep is not None:
            item = item[:(keep + 1) * tok.max_chars_per_token]
        elif len(item) > limit * tok.max_chars_per_token:
            _too_long(limit)   # longer than any text of `limit` tokens: not worth tokenizing
    tokens = _raw_token_ids(worker, item)
    if keep is not None:
        tokens = tokens[:keep]
        if not tokens:
            raise bad_request("The prompt cannot be empty", "input")
    if len(tokens) > limit:
        _too_long(limit)
    return tokens


def _raw_token_ids(worker: WorkerState,
                   item: str | list[int] | list[Mapping[str, Any]]) -> list[int]:
    tok = worker.tokenizer
    if isinstance(item, str):
        tokens = tok.encode(item)
    elif _is_conversation(item):
        tokens = tok.encode_chat(tok.render_chat([m for m in item if isinstance(m, Mapping)],
                                                 False, None), worker.max_model_len)
    else:
        tokens = [t for t in item if isinstance(t, int)]
        bad = next((t for t in tokens if not 0 <= t < tok.vocab_size), None)
        if bad is not None:
            raise bad_request(f"Token id {bad} is out of vocabulary", "input")
    if not tokens:
        raise bad_request("The prompt cannot be empty", "input")
    return tokens


def _too_long(limit: int) -> NoReturn:
    """vLLM 0.32's words (it tokenizes up to one token past the limit)."""
    raise prompt_too_long(limit, limit + 1)


@lru_cache(maxsize=65536)
def _token_vector(token_id: int, size: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    vector = np.random.default_rng(token_id).standard_normal(size).astype(np.float32)
    return vector / np.linalg.norm(vector)


def embedding_of(tokens: Sequence[int], dimensions: int, hidden: int) -> list[float]:
    """The emulated embedding of ``tokens``: deterministic, unit length, ``dimensions`` long."""
    total = np.zeros(hidden, dtype=np.float32)
    for token in tokens:
        total += _token_vector(token, hidden)
    head = total[:dimensions]
    norm = float(np.linalg.norm(head))
    return [float(x) for x in (head / norm if norm > 0 else head)]


def encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
