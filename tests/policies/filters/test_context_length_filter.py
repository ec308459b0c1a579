"""policies/filters/context_length.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from policies.base import CycleState, RoutingRequest
from policies.filters.context_length import ContextLengthFilter, ContextLengthFilterParams
from policies.producers.tokens import AT_LEAST_KEY, ESTIMATED_COUNT_KEY
from workers.models import WorkerView

ViewFactory = Callable[..., WorkerView]


@pytest.mark.parametrize(("prompt", "max_tokens", "margin", "expected"), [
    (4000, 96, 0, ["small", "big", "unknown"]),        # 4096 fits exactly
    (4000, 97, 0, ["big", "unknown"]),                 # 4097 does not
    (4095, None, 0, ["small", "big", "unknown"]),      # no max_tokens counts as 1
    (4096, None, 0, ["big", "unknown"]),
    (4000, 90, 10, ["big", "unknown"]),                # the margin counts
    (200_000, 10, 0, ["unknown"]),
])
def test_fits_prompt_plus_output(view: ViewFactory, prompt: int, max_tokens: int | None,
                                 margin: int, expected: list[str]) -> None:
    views = [view("small", max_model_len=4096), view("big", max_model_len=131072),
             view("unknown", max_model_len=0)]
    request = RoutingRequest("r", "m", max_tokens=max_tokens, num_prompt_tokens=prompt)
    plugin = ContextLengthFilter("context-length", ContextLengthFilterParams(margin_tokens=margin))
    assert [v.id for v in plugin.filter(request, views, CycleState())] == expected


@pytest.mark.parametrize(("prompt", "margin", "expected"), [
    (4085, 10, ["big"]),              # with the margin, the big window alone holds it all
    (4091, 10, ["big"]),              # and the prompt, a token and the margin
    (4093, 10, ["small", "big"]),     # no window holds those: without the margin, both
    (4095, 10, ["small", "big"]),     # room for one token: the engine counts exactly
    (4097, 10, ["big"]),
    (4102, 10, []),                   # fills every window by the router's count
])
def test_a_prompt_that_fits_only_without_the_margin_is_the_engines_to_judge(
        view: ViewFactory, prompt: int, margin: int, expected: list[str]) -> None:
    """The margin absorbs the router's miscount; it refused a prompt that by its own count
    fits, with vLLM's 'at least M+1 input tokens', which was not so."""
    views = [view("small", max_model_len=4096), view("big", max_model_len=4096 + 6)]
    request = RoutingRequest("r", "m", max_tokens=5, num_prompt_tokens=prompt)
    plugin = ContextLengthFilter("context-length", ContextLengthFilterParams(margin_tokens=margin))
    assert [v.id for v in plugin.filter(request, views, CycleState())] == expected


@pytest.mark.parametrize(("prompt", "max_tokens", "expected"), [
    (1000, 3500, ["big"]),                # no window holds 4500; 3500 is past the small one's
                                          # (its 400): the big one clamps it
    (1000, 5000, ["small", "big"]),       # past every window: each answers vLLM's 400
    (3000, 1500, ["big"]),                # only the bigger window holds the prompt + 1 token
    (4096, 1500, []),                     # the prompt fills every window: nothing left
    (1000, 1100, ["big"]),                # 2100 fits the big window: the small one is out
])
def test_when_no_window_holds_the_request_the_prompt_alone_decides(
        view: ViewFactory, prompt: int, max_tokens: int, expected: list[str]) -> None:
    views = [view("small", max_model_len=2048), view("big", max_model_len=4096)]
    request = RoutingRequest("r", "m", max_tokens=max_tokens, num_prompt_tokens=prompt)
    plugin = ContextLengthFilter("context-length", ContextLengthFilterParams())
    assert [v.id for v in plugin.filter(request, views, CycleState())] == expected


@pytest.mark.parametrize(("path", "prompt", "longest", "max_tokens", "expected"), [
    ("/v1/completions", 6000, 3000, 96, ["small", "big"]),   # each of the batch fits 4096
    ("/v1/completions", 6000, 4001, 96, ["big"]),            # its longest does not
    ("/v1/completions", 4096, 0, None, ["big"]),             # one prompt: room for a token
    ("/v1/embeddings", 4096, 0, 1, ["small", "big"]),        # an embedding makes none
    ("/v1/embeddings", 9000, 4096, 1, ["small", "big"]),     # nor does a batch of them
    ("/v1/embeddings", 4097, 0, 1, ["big"]),
])
def test_a_batch_needs_room_for_its_longest_prompt_and_an_embedding_for_no_output(
        view: ViewFactory, path: str, prompt: int, longest: int, max_tokens: int | None,
        expected: list[str]) -> None:
    views = [view("small", max_model_len=4096), view("big", max_model_len=131072)]
    request = RoutingRequest("r", "m", path=path, max_tokens=max_tokens,
                             num_prompt_tokens=prompt, longest_prompt_tokens=longest)
    plugin = ContextLengthFilter("context-length", ContextLengthFilterParams())
    assert [v.id for v in plugin.filter(request, views, CycleState())] == expected


@pytest.mark.parametrize(("cut", "expected"), [
    (None, ["big"]), (-1, ["small", "big"]), (256, ["small", "big"]), (2048, ["big"])])
def test_a_pooling_request_cut_by_the_engine_goes_where_the_cut_fits(
        view: ViewFactory, cut: int | None, expected: list[str]) -> None:
    """vLLM cuts each text to ``truncate_prompt_tokens`` (-1: its window) and serves it, and
    refuses a cut past its window: a long document was refused with a 400 the engine would
    not have given, and a cut of 2,048 must not go to a 512-token window."""
    views = [view("small", max_model_len=512), view("big", max_model_len=8192)]
    plugin = ContextLengthFilter("context-length", ContextLengthFilterParams())
    long = RoutingRequest("r", "m", path="/rerank", max_tokens=1, num_prompt_tokens=3000,
                          truncate_prompt_tokens=cut)
    assert [v.id for v in plugin.filter(long, views, CycleState())] == expected


def test_a_score_cut_by_side_is_checked_on_what_is_kept(view: ViewFactory) -> None:
    """``max_tokens_per_doc`` cuts the documents (the tokens producer's longest is then of
    the cut texts), and vLLM refuses a cut that is not below its window."""
    views = [view("small", max_model_len=512), view("big", max_model_len=8192)]
    plugin = ContextLengthFilter("context-length", ContextLengthFilterParams())
    kept = RoutingRequest("r", "m", path="/rerank", max_tokens=1, num_prompt_tokens=3100,
                          longest_prompt_tokens=100, text_cuts=[0, 100, 100])
    assert [v.id for v in plugin.filter(kept, views, CycleState())] == ["small", "big"]
    past = RoutingRequest("r", "m", path="/rerank", max_tokens=1, num_prompt_tokens=300,
                          longest_prompt_tokens=100, text_cuts=[0, 512, 512])
    assert [v.id for v in plugin.filter(past, views, CycleState())] == ["big"]


@pytest.mark.parametrize(("text", "media", "expected"), [
    (1000, 7500, ["big"]),              # the media's estimate too: the big window preferred
    (1000, 20_000, ["small", "big"]),   # no window holds the estimate: the text decides
    (17_000, 20_000, []),               # the text alone fits no window: refused
])
def test_a_chats_media_are_a_preference_never_a_refusal(
        view: ViewFactory, text: int, media: int, expected: list[str]) -> None:
    """Counted as certain, ten images' estimate refused a request the engine would serve
    (its own count of them smaller); left out, it sent them to a window too small."""
    views = [view("small", max_model_len=8192), view("big", max_model_len=16384)]
    request = RoutingRequest("r", "m", max_tokens=100, num_prompt_tokens=text + media,
                             media_prompt_tokens=media)
    plugin = ContextLengthFilter("context-length", ContextLengthFilterParams())
    assert [v.id for v in plugin.filter(request, views, CycleState())] == expected


@pytest.mark.parametrize(("prompt", "estimated", "at_least", "expected"), [
    (5000, True, False, ["big", "big-too"]),   # past every window by another tokenizer's count:
    (50000, True, False, ["big", "big-too"]),  # the largest window's engines count it
    (5000, False, False, []),                  # the model's own tokenizer (or token ids)
    (5000, True, True, []),                    # a lower bound from the text's length alone
])
def test_a_prompt_counted_by_another_tokenizer_is_left_to_the_largest_window(
        view: ViewFactory, prompt: int, estimated: bool, at_least: bool,
        expected: list[str]) -> None:
    """A count by the default tokenizer is not the engine's: refusing a prompt the engine
    counts within its window refused what it serves."""
    views = [view("small", max_model_len=2048), view("big", max_model_len=4096),
             view("big-too", max_model_len=4096)]
    request = RoutingRequest("r", "m", max_tokens=16, num_prompt_tokens=prompt)
    request.attributes[ESTIMATED_COUNT_KEY] = estimated
    request.attributes[AT_LEAST_KEY] = at_least
    plugin = ContextLengthFilter("context-length", ContextLengthFilterParams())
    assert [v.id for v in plugin.filter(request, views, CycleState())] == expected
