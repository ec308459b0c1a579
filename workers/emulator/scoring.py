"""vLLM's score and rerank APIs of an emulated embedding model: ``POST /score``,
``/v1/score``, ``/rerank``, ``/v1/rerank`` and ``/v2/rerank``.

vLLM scores with an embedding model as a bi-encoder: every text of both sides is embedded
once (one engine request each, batched with the rest: ``workers.emulator.embeddings``), and
a pair's score is the cosine of its two embeddings; the usage counts every text embedded (a
query scored against N documents once). A rerank answers each document's score as its
``relevance_score``, the documents sorted by it (the best first, ties in their order) and
cut to ``top_n`` when that is set (0: all), each with the document echoed as vLLM echoes it
(``{"text": ..., "multi_modal": null}``).

Bodies are checked as vLLM 0.32 checks them, in its words: a score's sides are the first of
``queries``/``documents``, ``queries``/``items``, ``data_1``/``data_2``, ``text_1``/``text_2``
that the body gives (else every shape's pydantic errors, as vLLM lists them); the sides pair
one to one, one to many or many to many; multimodal content is refused (the emulated models
take text only); each text is tokenized and checked against the window as an embedding's
input is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson
from aiohttp import web

from workers.emulator.embeddings import (
    check_engine,
    embedding_of,
    lax_int,
    pooling_usage,
    run_pooling,
    served_model,
    tokenized,
    truncation,
)
from workers.emulator.errors import FieldError, bad_request, validation_errors
from workers.emulator.protocol import body_request_id, read_json_body
from workers.emulator.state import WORKER, WorkerState

SCORE_PATHS = ("/score", "/v1/score")
RERANK_PATHS = ("/rerank", "/v1/rerank", "/v2/rerank")
# a score request's two sides, under each pair of names vLLM takes, in the order it tries them
SCORE_SIDES = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"),
               ("text_1", "text_2"))


async def score(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    data = await read_json_body(request)
    first, second = _score_sides(data)
    model = served_model(worker, data)
    queries, documents = _paired(worker, data[first], data[second])
    request_id = worker.new_request_id("score", request, body_request_id(data))
    scores, usage = await _scores(worker, request_id, queries, documents, data)
    body = {"id": request_id, "object": "list", "created": int(time.time()), "model": model,
            "data": [{"index": i, "object": "score", "score": value}
                     for i, value in enumerate(scores)],
            "usage": usage}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def rerank(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    data = await read_json_body(request)
    top_n = _rerank_top_n(data)
    model = served_model(worker, data)
    queries, documents = _paired(worker, data["query"], data["documents"])
    request_id = worker.new_request_id("score", request, body_request_id(data))
    scores, usage = await _scores(worker, request_id, queries, documents, data)
    ranked = sorted(range(len(scores)), key=scores.__getitem__, reverse=True)  # stable
    kept = ranked[:top_n] if top_n > 0 else ranked
    body = {"id": request_id, "model": model,
            "usage": {"prompt_tokens": usage["prompt_tokens"],
                      "total_tokens": usage["total_tokens"]},
            "results": [{"index": i, "document": {"text": documents[i], "multi_modal": None},
                         "relevance_score": scores[i]} for i in kept]}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _score_sides(data: Mapping[str, Any]) -> tuple[str, str]:
    """The names of a score request's two sides: the first shape the body fits; else all
    shapes' errors, as pydantic lists them for vLLM's union of request types."""
    errors: list[FieldError] = []
    for first, second in SCORE_SIDES:
        found = _item_errors(data, first, many=True) + _item_errors(data, second, many=True)
        if not found:
            return first, second
        errors += found
    raise validation_errors(errors)


def _rerank_top_n(data: Mapping[str, Any]) -> int:
    """``top_n`` (0 when absent), once ``query``, ``documents`` and it are valid."""
    errors = _item_errors(data, "query", many=False) + _item_errors(data, "documents", many=True)
    raw = data.get("top_n", 0)
    top_n = lax_int(raw)
    if isinstance(top_n, tuple):
        errors.append(("top_n", *top_n, raw, None))
    elif top_n < 0:
        errors.append(("top_n", "Input should be greater than or equal to 0",
                       "greater_than_equal", raw, {"ge": 0}))
    if errors:
        raise validation_errors(errors)
    assert isinstance(top_n, int)
    return top_n


def _item_errors(data: Mapping[str, Any], name: str, many: bool) -> list[FieldError]:
    """pydantic's errors for the field ``name``, an item (a string or ``{"content": [...]}``)
    or, when ``many``, a list of items too; none when it is valid."""
    if name not in data:
        return [(name, "Field required", "missing", data, None)]
    value = data[name]
    if _is_item(value) or (many and isinstance(value, list) and all(map(_is_item, value))):
        return []
    errors = _not_an_item(name, value)
    if not many:
        return errors
    if not isinstance(value, list):
        return [*errors, (name, "Input should be a valid list", "list_type", value, None)]
    return errors + [error for i, item in enumerate(value) if not _is_item(item)
                     for error in _not_an_item(f"{name}.{i}", item)]


def _not_an_item(where: str, value: Any) -> list[FieldError]:
    """pydantic's errors for a value that is neither a string nor multimodal content."""
    as_content: FieldError = (f"{where}.ScoreMultiModalParam", "Input should be a valid "
                              "dictionary", "dict_type", value, None)
    if isinstance(value, dict):
        content = f"{where}.ScoreMultiModalParam.content"
        as_content = ((content, "Field required", "missing", value, None)
                      if "content" not in value else
                      (content, "Input should be a valid list", "list_type", value["content"],
                       None))
    return [(where, "Input should be a valid string", "string_type", value, None), as_content]


def _is_item(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, dict)
                                      and isinstance(value.get("content"), list))


def _paired(worker: WorkerState, raw_1: Any, raw_2: Any) -> tuple[list[str], list[str]]:
    """The two sides' texts, checked as vLLM checks them (in its order and words)."""
    side_1 = raw_1 if isinstance(raw_1, list) else [raw_1]
    side_2 = raw_2 if isinstance(raw_2, list) else [raw_2]
    if any(not isinstance(item, str) for item in (*side_1, *side_2)):
        raise bad_request(f"MultiModalParam is not supported for {worker.config.model.name}")
    if len(side_1) > 1 and len(side_1) != len(side_2):
        raise bad_request("Input lengths must be either 1:1, 1:N or N:N")
    if not side_1:
        raise bad_request("At least one text element must be given")
    if not side_2:
        raise bad_request("At least one text_pair element must be given")
    return side_1, side_2


async def _scores(worker: WorkerState, request_id: str, queries: Sequence[str],
                  documents: Sequence[str], data: Mapping[str, Any]
                  ) -> tuple[list[float], dict[str, Any]]:
    """Each pair's score, the cosine of its embeddings (every text embedded once, cut as
    the request asks: ``truncate_prompt_tokens``, then ``max_tokens_per_query``/``_doc``),
    and the usage of what was embedded. The cosines are computed off the event loop, one
    document at a time (the other workers of this process answer meanwhile)."""
    check_engine(worker)
    whole = truncation(worker, data)
    per_query = truncation(worker, data, "max_tokens_per_query")
    per_doc = truncation(worker, data, "max_tokens_per_doc")
    cuts = ([_both(whole, per_query, worker.max_model_len)] * len(queries)
            + [_both(whole, per_doc, worker.max_model_len)] * len(documents))
    prompts = await tokenized(worker, [*queries, *documents], cuts)
    await run_pooling(worker, request_id, prompts)
    scores = await asyncio.to_thread(_cosines, prompts[:len(queries)], prompts[len(queries):],
                                     worker.config.model.hidden)
    return scores, pooling_usage(prompts)


def _both(whole: int | None, side: int | None, window: int) -> int | None:
    """The tokens a text keeps under both cuts vLLM applies (``max_tokens_per_*`` first,
    then ``truncate_prompt_tokens``; -1 the window)."""
    cuts = [cut if cut >= 0 else window for cut in (whole, side) if cut is not None]
    return min(cuts) if cuts else None


def _cosines(queries: Sequence[Sequence[int]], documents: Sequence[Sequence[int]],
             hidden: int) -> list[float]:
    """Each pair's cosine, one query against every document or query i against document i,
    without holding every document's vector."""
    firsts = [np.asarray(embedding_of(tokens, hidden, hidden), dtype=np.float64)
              for tokens in queries]
    return [_cosine(firsts[0] if len(firsts) == 1 else firsts[i],
                    np.asarray(embedding_of(tokens, hidden, hidden), dtype=np.float64))
            for i, tokens in enumerate(documents)]


def _cosine(a: np.ndarray[Any, np.dtype[np.float64]],
            b: np.ndarray[Any, np.dtype[np.float64]]) -> float:
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b)) / norms if norms > 0 else 0.0
