"""``RoutingRequest``: the output tokens a worker will actually serve; the routed paths."""

from __future__ import annotations

from policies.base import API_OF_PATH, ROUTED_PATHS, RUNNER_OF_PATH, RoutingRequest


def request_of(prompt_tokens: int, max_tokens: int | None) -> RoutingRequest:
    request = RoutingRequest(request_id="r", model="m", max_tokens=max_tokens)
    request.num_prompt_tokens = prompt_tokens
    return request


def test_max_tokens_beyond_the_window_is_clamped_as_vllm_does() -> None:
    assert request_of(1_000, 10_000_000).output_tokens_within(8_192) == 7_192
    assert request_of(1_000, 7_192).output_tokens_within(8_192) == 7_192   # fits exactly
    assert request_of(1_000, 500).output_tokens_within(8_192) == 500


def test_a_full_window_leaves_one_token_and_an_unknown_window_clamps_nothing() -> None:
    assert request_of(8_192, 100).output_tokens_within(8_192) == 1
    assert request_of(9_000, 100).output_tokens_within(8_192) == 1
    assert request_of(1_000, 10_000_000).output_tokens_within(0) == 10_000_000


def test_without_max_tokens_the_default_is_clamped_too() -> None:
    request = request_of(8_000, None)
    assert request.expected_output_tokens == 256
    assert request.output_tokens_within(8_192) == 192


def test_the_pooling_apis_paths_stay_apart_and_group_by_api() -> None:
    assert {path for path in ROUTED_PATHS if RUNNER_OF_PATH[path] == "pooling"} == {
        "/v1/embeddings", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank",
        "/pooling", "/classify"}
    assert {API_OF_PATH[path] for path in ("/score", "/v1/score")} == {"score"}
    assert {API_OF_PATH[path] for path in ("/rerank", "/v1/rerank", "/v2/rerank")} == {"rerank"}
    assert RUNNER_OF_PATH["/v1/messages"] == "generate"
