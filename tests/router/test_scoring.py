"""Score and rerank bodies: every shape vLLM takes, routed as each pair's two texts, and the
400 for each bad body (naming the field; vLLM's own words where the sides cannot pair)."""

from __future__ import annotations

import orjson
import pytest

from router.errors import EngineBadRequest, InvalidRequest
from router.protocol import RERANK_PATHS, SCORE_PATHS, ParsedRequest, parse_request

MODEL = "BAAI/bge-reranker-v2-m3"
MULTIMODAL = {"content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}},
                          {"type": "text", "text": "a cat"}]}


def parse(body: dict[str, object], path: str = "/score") -> ParsedRequest:
    return parse_request(orjson.dumps({"model": MODEL, **body}), path, "req-1", {}, 1.0)


@pytest.mark.parametrize("path", SCORE_PATHS)
@pytest.mark.parametrize("sides", [("queries", "documents"), ("queries", "items"),
                                   ("data_1", "data_2"), ("text_1", "text_2")])
def test_every_score_shape_is_routed_as_its_texts_each_once(path: str,
                                                            sides: tuple[str, str]) -> None:
    parsed = parse({sides[0]: "q", sides[1]: ["a", "b"]}, path)
    r = parsed.routing
    assert (r.path, r.prompt, r.messages) == (path, ["q", "a", "b"], None)
    assert (r.max_tokens, r.stream, parsed.wants_usage) == (1, False, False)
    assert parse({sides[0]: ["q1", "q2"], sides[1]: ["a", "b"]}, path).routing.prompt == [
        "q1", "q2", "a", "b"]                      # N:N, the queries then the documents
    assert parse({sides[0]: "q", sides[1]: "a"}, path).routing.prompt == ["q", "a"]


def test_the_first_shape_vllm_tries_wins() -> None:
    r = parse({"text_1": "t", "text_2": "u", "queries": "q", "documents": "d"}).routing
    assert r.prompt == ["q", "d"]
    r = parse({"queries": "q", "text_1": "t", "text_2": "u"}).routing     # no 'documents'
    assert r.prompt == ["t", "u"]


@pytest.mark.parametrize("path", RERANK_PATHS)
def test_a_rerank_is_routed_as_the_query_and_its_documents(path: str) -> None:
    r = parse({"query": "where", "documents": ["a", "b", "c"], "top_n": 2}, path).routing
    assert (r.path, r.prompt, r.max_tokens, r.stream) == (
        path, ["where", "a", "b", "c"], 1, False)
    assert parse({"query": "q", "documents": "only"}, path).routing.prompt == ["q", "only"]


def test_multimodal_content_counts_its_text_parts() -> None:
    r = parse({"query": MULTIMODAL, "documents": [MULTIMODAL, "plain"]}, "/rerank").routing
    assert r.prompt == ["a cat", "a cat", "plain"]
    assert parse({"text_1": "q", "text_2": {"content": []}}).routing.prompt == ["q", ""]


def test_a_request_naming_no_model_is_for_the_fleets_own() -> None:
    raw = orjson.dumps({"query": "q", "documents": ["a"]})
    r = parse_request(raw, "/rerank", "req-1", {}, 1.0, default_model="only").routing
    assert r.model == "only"


@pytest.mark.parametrize(("path", "body", "param", "message"), [
    ("/rerank", {"documents": ["a"]}, "query", "Missing required parameter: 'query'."),
    ("/rerank", {"query": "q"}, "documents", "Missing required parameter: 'documents'."),
    ("/rerank", {"query": None, "documents": ["a"]}, "query",
     "Missing required parameter: 'query'."),
    ("/score", {"queries": "q"}, "documents",
     "Missing required parameter: 'documents' (or 'items')."),
    ("/score", {"items": ["a"]}, "queries", "Missing required parameter: 'queries'."),
    ("/score", {"text_1": "q"}, "text_2", "Missing required parameter: 'text_2'."),
    ("/v1/score", {"data_2": "d"}, "data_1", "Missing required parameter: 'data_1'."),
    ("/score", {}, "queries",
     "Missing required parameters: the two sides to score, 'queries' with 'documents' (or "
     "'items'), 'data_1' with 'data_2', or 'text_1' with 'text_2'."),
    ("/rerank", {"query": ["q1", "q2"], "documents": ["a"]}, "query",
     'query: must be a string or multimodal content ({"content": [parts]}).'),
    ("/rerank", {"query": "q", "documents": ["a", 5]}, "documents[1]",
     'documents[1]: must be a string or multimodal content ({"content": [parts]}).'),
    ("/score", {"text_1": {"text": "q"}, "text_2": "a"}, "text_1",
     'text_1: must be a string or multimodal content ({"content": [parts]}).'),
    ("/score", {"text_1": "q", "text_2": [["nested"]]}, "text_2[0]",
     'text_2[0]: must be a string or multimodal content ({"content": [parts]}).'),
    ("/rerank", {"model": 7, "query": "q", "documents": ["a"]}, "model",
     "You must provide a model parameter (a non-empty string)."),
])
def test_a_bad_body_is_a_400_naming_the_field(path: str, body: dict[str, object], param: str,
                                              message: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse(body, path)
    assert (info.value.status, info.value.param, info.value.message) == (400, param, message)
    assert not isinstance(info.value, EngineBadRequest)


@pytest.mark.parametrize(("body", "message"), [
    ({"text_1": ["a", "b"], "text_2": ["x", "y", "z"]},
     "Input lengths must be either 1:1, 1:N or N:N"),
    ({"text_1": [], "text_2": ["x"]}, "At least one text element must be given"),
    ({"text_1": "a", "text_2": []}, "At least one text_pair element must be given"),
    ({"queries": ["a", "b"], "items": ["x"]}, "Input lengths must be either 1:1, 1:N or N:N"),
])
def test_sides_that_cannot_pair_are_refused_in_vllms_words_and_shape(
        body: dict[str, object], message: str) -> None:
    with pytest.raises(EngineBadRequest) as info:
        parse(body)
    assert orjson.loads(info.value.body()) == {"error": {
        "message": message, "type": "BadRequestError", "param": None, "code": 400}}
    with pytest.raises(EngineBadRequest, match="At least one text_pair element"):
        parse({"query": "q", "documents": []}, "/rerank")


def test_a_query_against_many_documents_is_held_once() -> None:
    """Repeated per document, a long query behind 100,000 one-letter documents was billions
    of token ids to hold and hash before any worker saw the request."""
    query = "word " * 2000
    r = parse({"query": query, "documents": ["x"] * 100_000}, "/rerank").routing
    assert len(r.prompt) == 100_001 and r.prompt[0] == query
    assert sum(map(len, r.prompt)) == len(query) + 100_000


@pytest.mark.parametrize(("value", "cut"), [
    (-1, -1), (512, 512), (0, 0), ("512", 512), (512.0, 512), (True, 1), (False, 0),
    (None, None), (-2, None), ("x", None), (1.5, None), ([3], None)])
def test_the_cut_asked_for_is_read_as_vllm_reads_it(value: object, cut: int | None) -> None:
    """vLLM's pydantic takes ``"512"``, ``512.0`` and ``true`` as integers."""
    body = {"query": "q", "documents": ["a"], "truncate_prompt_tokens": value}
    assert parse(body, "/rerank").routing.truncate_prompt_tokens == cut
    assert parse({"query": "q", "documents": ["a"], "max_tokens_per_doc": 64},
                 "/rerank").routing.truncate_prompt_tokens is None


def test_a_cut_by_side_is_given_per_text_in_the_routed_order() -> None:
    body = {"queries": ["q1", "q2"], "documents": ["a", "b"]}
    assert parse(body).routing.text_cuts is None
    assert parse({**body, "max_tokens_per_doc": 64}).routing.text_cuts == [0, 0, 64, 64]
    assert parse({**body, "max_tokens_per_query": "8", "max_tokens_per_doc": 0.0}
                 ).routing.text_cuts == [8, 8, 0, 0]
    rerank = {"query": "q", "documents": ["a", "b", "c"], "max_tokens_per_doc": 5.0}
    assert parse(rerank, "/rerank").routing.text_cuts == [0, 5, 5, 5]
