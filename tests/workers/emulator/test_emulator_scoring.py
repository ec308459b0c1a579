"""vLLM's score and rerank APIs of an emulated embedding model, in its own process: the
cosine of the emulated embeddings, vLLM's bodies, and vLLM's refusals."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.workers.emulator.emulator_fixtures import MODEL, emulator
from workers.emulator.process import EmulatorProcess

pytestmark = pytest.mark.integration
EMBEDDER = "minilm"
QUERY = "where is my parcel"
DOCUMENTS = ["my parcel is late", "the integral of x squared", "where is my parcel now"]


@pytest.fixture(scope="module")
def embedder() -> Iterator[EmulatorProcess]:
    with EmulatorProcess(gpu="l40s", model="all-minilm-l6-v2", served_model_names=[EMBEDDER],
                         time_scale=0.01, emulate={"max_model_len": 64}) as proc:
        yield proc


async def post(url: str, json: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(url, json=json) as resp:
        return resp.status, await resp.json(content_type=None)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b))


async def embedded(url: str, texts: list[str]) -> tuple[list[list[float]], int]:
    status, body = await post(f"{url}/v1/embeddings", {"model": EMBEDDER, "input": texts})
    assert status == 200, body
    return [item["embedding"] for item in body["data"]], body["usage"]["prompt_tokens"]


async def test_a_score_is_the_cosine_of_the_embeddings_and_usage_counts_each_text_once(
        embedder: EmulatorProcess) -> None:
    vectors, tokens = await embedded(embedder.url, [QUERY, *DOCUMENTS])
    for path in ("/score", "/v1/score"):
        status, body = await post(embedder.url + path, {"model": EMBEDDER, "text_1": QUERY,
                                                        "text_2": DOCUMENTS})
        assert status == 200, body
        assert list(body) == ["id", "object", "created", "model", "data", "usage"]
        assert body["id"].startswith("score-") and body["object"] == "list"
        assert body["model"] == EMBEDDER
        assert [item["index"] for item in body["data"]] == [0, 1, 2]
        assert {item["object"] for item in body["data"]} == {"score"}
        assert [item["score"] for item in body["data"]] == pytest.approx(
            [cosine(vectors[0], vector) for vector in vectors[1:]], abs=1e-6)
        assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens,
                                 "completion_tokens": 0, "prompt_tokens_details": None,
                                 "completion_tokens_details": None}


@pytest.mark.parametrize("sides", [("queries", "documents"), ("queries", "items"),
                                   ("data_1", "data_2"), ("text_1", "text_2")])
async def test_every_shape_vllm_takes_scores_pairs_one_to_one(
        embedder: EmulatorProcess, sides: tuple[str, str]) -> None:
    vectors, _ = await embedded(embedder.url, ["a b", "c d", "a b", "x y"])
    status, body = await post(f"{embedder.url}/score", {
        "model": EMBEDDER, sides[0]: ["a b", "c d"], sides[1]: ["a b", "x y"]})
    assert status == 200, body
    first, second = (item["score"] for item in body["data"])
    assert first == pytest.approx(1.0, abs=1e-6)
    assert second == pytest.approx(cosine(vectors[1], vectors[3]), abs=1e-6)


async def test_a_rerank_sorts_by_relevance_echoes_documents_and_keeps_top_n(
        embedder: EmulatorProcess) -> None:
    _, scored = await post(f"{embedder.url}/score", {"model": EMBEDDER, "text_1": QUERY,
                                                      "text_2": DOCUMENTS})
    scores = [item["score"] for item in scored["data"]]
    order = sorted(range(3), key=scores.__getitem__, reverse=True)
    for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
        status, body = await post(embedder.url + path, {"model": EMBEDDER, "query": QUERY,
                                                        "documents": DOCUMENTS})
        assert status == 200, body
        assert list(body) == ["id", "model", "usage", "results"]
        assert body["id"].startswith("score-")
        assert [result["index"] for result in body["results"]] == order
        assert [result["document"] for result in body["results"]] == [
            {"text": DOCUMENTS[i], "multi_modal": None} for i in order]
        assert [result["relevance_score"] for result in body["results"]] == pytest.approx(
            [scores[i] for i in order], abs=1e-6)
        assert body["usage"] == {"prompt_tokens": scored["usage"]["prompt_tokens"],
                                 "total_tokens": scored["usage"]["prompt_tokens"]}
    status, top = await post(f"{embedder.url}/rerank", {"model": EMBEDDER, "query": QUERY,
                                                        "documents": DOCUMENTS, "top_n": 2})
    assert status == 200 and [result["index"] for result in top["results"]] == order[:2]
    status, more = await post(f"{embedder.url}/rerank", {"model": EMBEDDER, "query": QUERY,
                                                         "documents": DOCUMENTS, "top_n": 9})
    assert status == 200 and len(more["results"]) == 3
    status, one = await post(f"{embedder.url}/rerank", {"model": EMBEDDER, "query": QUERY,
                                                        "documents": "a single document"})
    assert status == 200 and one["results"][0]["index"] == 0
    for lax in (True, 1.0, "1"):        # pydantic's lax integers, as vLLM takes them
        status, best = await post(f"{embedder.url}/rerank", {
            "model": EMBEDDER, "query": QUERY, "documents": DOCUMENTS, "top_n": lax})
        assert status == 200 and [r["index"] for r in best["results"]] == order[:1], lax


@pytest.mark.parametrize(("path", "body", "message"), [
    ("/score", {"text_1": ["a", "b"], "text_2": ["x", "y", "z"]},
     "Input lengths must be either 1:1, 1:N or N:N"),
    ("/score", {"text_1": [], "text_2": ["x"]}, "At least one text element must be given"),
    ("/score", {"text_1": "a", "text_2": []}, "At least one text_pair element must be given"),
    ("/rerank", {"query": "q", "documents": []}, "At least one text_pair element must be given"),
    ("/rerank", {"query": "q", "documents": [{"content": [{"type": "text", "text": "hi"}]}]},
     "MultiModalParam is not supported for all-minilm-l6-v2"),
])
async def test_what_vllm_refuses_after_validation_in_its_words(
        embedder: EmulatorProcess, path: str, body: dict[str, Any], message: str) -> None:
    assert await post(embedder.url + path, {"model": EMBEDDER, **body}) == (400, {"error": {
        "message": message, "type": "BadRequestError", "param": None, "code": 400}})


async def test_a_body_of_no_shape_is_every_shapes_validation_errors(
        embedder: EmulatorProcess) -> None:
    status, body = await post(f"{embedder.url}/score", {"model": EMBEDDER, "text_1": "a"})
    missing = "'msg': 'Field required', 'input': '<dict of 2 items>'}"
    assert (status, body["error"]["param"], body["error"]["type"]) == (
        400, "body.queries", "Bad Request")
    assert body["error"]["message"] == "7 validation errors:\n" + "\n".join(
        f"  {{'type': 'missing', 'loc': 'body.{name}', {missing}" for name in (
            "queries", "documents", "queries", "items", "data_1", "data_2", "text_2"))
    status, body = await post(f"{embedder.url}/rerank", {"model": EMBEDDER, "query": "q",
                                                         "documents": ["a"], "top_n": -1})
    assert (status, body["error"]["param"]) == (400, "body.top_n")
    assert body["error"]["message"] == (
        "1 validation error:\n  {'type': 'greater_than_equal', 'loc': 'body.top_n', 'msg': "
        "'Input should be greater than or equal to 0', 'input': '-1', 'ctx': {'ge': 0}}")
    status, body = await post(f"{embedder.url}/rerank", {"model": EMBEDDER,
                                                         "query": ["q1", "q2"], "documents": "a"})
    assert (status, body["error"]["param"]) == (400, "body.query")
    assert body["error"]["message"].startswith("2 validation errors:\n  {'type': 'string_type'")
    status, body = await post(f"{embedder.url}/rerank", {"model": EMBEDDER, "query": "q",
                                                         "documents": "a", "top_n": "x"})
    assert (status, body["error"]["message"]) == (400, (
        "1 validation error:\n  {'type': 'int_parsing', 'loc': 'body.top_n', 'msg': 'Input "
        "should be a valid integer, unable to parse string as an integer', 'input': 'x'}"))
    status, body = await post(f"{embedder.url}/score", {"model": EMBEDDER, "text_1": {"x": 1},
                                                        "text_2": "b"})
    assert status == 400 and body["error"]["message"].endswith(
        "  {'type': 'missing', 'loc': 'body.text_1.ScoreMultiModalParam.content', 'msg': "
        "'Field required', 'input': '<dict of 1 items>'}\n  {'type': 'list_type', 'loc': "
        "'body.text_1', 'msg': 'Input should be a valid list', 'input': '<dict of 1 items>'}")


async def test_an_unknown_model_and_an_over_long_text_are_refused_as_vllm_does(
        embedder: EmulatorProcess) -> None:
    status, body = await post(f"{embedder.url}/score", {"model": "other", "text_1": "a",
                                                        "text_2": "b"})
    assert status == 404 and "The model `other` does not exist" in body["error"]["message"]
    status, body = await post(f"{embedder.url}/rerank", {"model": EMBEDDER, "query": "q",
                                                         "documents": ["ok", "word " * 100]})
    assert status == 400 and body["error"]["param"] == "input_tokens"
    assert "maximum context length is 64 tokens" in body["error"]["message"]


async def test_a_generative_model_has_no_score_or_rerank_route() -> None:
    with emulator(time_scale=0.01) as generative:
        for path in ("/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank"):
            assert await post(generative.url + path, {"model": MODEL, "query": "q",
                                                      "documents": ["a"]}) == (
                404, {"detail": "Not Found"})
