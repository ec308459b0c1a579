"""Which API an ``/invocations`` body is (``workers.invocations``): by the fields each of
vLLM's request types requires, in vLLM's order, among the types of the model's runner."""

from __future__ import annotations

from typing import Any

import pytest

from policies.base import RUNNER_OF_PATH
from workers.invocations import invocation_path, no_handler_message

GENERATE = frozenset({"generate"})
POOLING = frozenset({"pooling"})
EITHER: frozenset[str] = frozenset()        # a model no worker serves


@pytest.mark.parametrize(("body", "runners", "path"), [
    ({"messages": []}, GENERATE, "/v1/chat/completions"),
    ({"messages": [], "prompt": "hi"}, GENERATE, "/v1/chat/completions"),   # chat first
    ({"messages": None, "prompt": "hi"}, GENERATE, "/v1/completions"),    # null: not given
    ({"prompt": [1, 2]}, GENERATE, "/v1/completions"),
    ({"prompt_embeds": "AAAA"}, GENERATE, "/v1/completions"),
    ({"messages": []}, POOLING, "/v1/embeddings"),        # a pooling model's chat: embedded
    ({"input": "hi"}, POOLING, "/v1/embeddings"),
    ({"input": "hi", "query": "q", "documents": ["d"]}, POOLING, "/v1/embeddings"),
    ({"query": "q", "documents": ["d"]}, POOLING, "/rerank"),
    ({"data_1": "a", "data_2": "b"}, POOLING, "/score"),
    ({"queries": "a", "documents": ["b"]}, POOLING, "/score"),
    ({"queries": "a", "items": ["b"]}, POOLING, "/score"),
    ({"text_1": "a", "text_2": "b"}, POOLING, "/score"),
    ({"data": {"image": "x"}}, POOLING, "/pooling"),
    ({"messages": []}, EITHER, "/v1/chat/completions"),
    ({"input": "hi"}, EITHER, "/v1/embeddings"),
    ({"input": "hi"}, GENERATE | POOLING, "/v1/embeddings"),
])
def test_a_body_is_the_first_api_whose_required_fields_it_has(
        body: dict[str, Any], runners: frozenset[str], path: str) -> None:
    assert invocation_path(body, runners) == path
    # a path the router routes, for a model of that runner
    assert not runners or RUNNER_OF_PATH[path] in runners


@pytest.mark.parametrize(("body", "runners"), [
    ({"input": "hi"}, GENERATE),
    ({"model": "m", "max_tokens": 3}, EITHER),
    ({"messages": None, "prompt": None}, GENERATE),
])
def test_a_generative_models_body_of_no_other_api_is_a_completion(
        body: dict[str, Any], runners: frozenset[str]) -> None:
    """vLLM's completion type leaves ``prompt`` optional: such a body reaches the
    completion's handler, which refuses it ("Either prompt or prompt_embeds must be
    provided"), not "Cannot find suitable handler"."""
    assert invocation_path(body, runners) == "/v1/completions"


@pytest.mark.parametrize("body", [
    {"prompt": "hi"},
    {"query": "q"},                            # one side of a rerank
    {"text_1": "a", "documents": ["b"]},
    {"input": None, "messages": None},
])
def test_a_pooling_models_body_without_any_apis_fields_is_none(body: dict[str, Any]) -> None:
    assert invocation_path(body, POOLING) is None


def test_the_400_names_the_types_of_the_models_runner() -> None:
    start = "Cannot find suitable handler for request. Expected one of: "
    assert no_handler_message(GENERATE) == start + "['ChatCompletionRequest', 'CompletionRequest']"
    assert no_handler_message(POOLING) == start + (
        "['EmbeddingRequest', 'RerankRequest', 'ScoreRequest', 'PoolingRequest']")
    assert no_handler_message(EITHER) == start + (
        "['ChatCompletionRequest', 'CompletionRequest', 'EmbeddingRequest', 'RerankRequest', "
        "'ScoreRequest', 'PoolingRequest']")
