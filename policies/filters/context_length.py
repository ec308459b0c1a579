"""``context-length`` filter: keep workers whose context window fits the request.

A worker fits when ``prompt + max_tokens + margin_tokens <= max_model_len``,
counting ``max_tokens`` as 1 when the request does not set it (the worker then generates
up to its limit). When no worker fits the whole request, the workers whose window still
holds the prompt and one output token are kept: vLLM serves such a request, clamping
``max_tokens`` to what is left of the window, so refusing it would refuse what the engine
accepts. It clamps only a ``max_tokens`` within its window (a longer one is its 400,
``max_tokens=N cannot be greater than max_model_len=M``): of those workers, the ones whose
window is at least ``max_tokens`` are kept when there are any; else all of them, to answer
that 400 in the engine's words. Only a prompt that fits no window leaves nothing (the router
then answers vLLM's 400). A worker with an unknown ``max_model_len`` (0) is kept. Needs
``num_prompt_tokens`` (the tokens producer is added automatically). ``margin_tokens``
absorbs the difference between the router's token count and the worker's tokenizer: workers
with that room are preferred, and a prompt that fits a window only without it is sent to
that window's workers, whose engine counts it exactly (and refuses it in its own words when
it does not fit); the router refuses only a prompt that by its count fits no window.

The router's count is an estimate when the model has no tokenizer of its own configured
(the ``tokens`` producer's ``models`` or ``tokenizers``): the default tokenizer may count a
text in more tokens than the engine's does, or fewer (each vocabulary holds whole what
another cuts in pieces). Such a prompt that overflows every
window is sent to the workers of the largest window, whose engine counts it and serves it or
refuses it in its own words; the router refuses only a text too long for any window by its
length alone (the ``tokens`` producer's bound: no token holds more characters than the
default tokenizer's longest), a prompt of token ids and one counted by the model's own
tokenizer.

The prompt is the longest one of a batch (several completion prompts, several embedding
inputs, a score's or a rerank's texts): vLLM serves each on its own, so only each must fit,
not their sum. A pooling request (embeddings, scores, reranking, pooling, classification)
generates nothing: its input may fill the whole window.

A chat's images, audio and video count as the ``tokens`` producer's estimate of them
(``RoutingRequest.media_prompt_tokens``): the workers whose window holds them are kept; when
none does, those whose window holds the text are (the estimate is no engine's count: the
worker refuses what overflows it), and only a text that fits no window is refused.

```yaml
filters:
  - type: context-length
    params: {margin_tokens: 0}
```
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from policies.base import RUNNER_OF_PATH, CycleState, RoutingRequest
from policies.errors import ParamError
from policies.producers.tokens import AT_LEAST_KEY, ESTIMATED_COUNT_KEY
from policies.registry import PluginRegistry
from workers.models import WorkerView

TYPE_NAME = "context-length"
POOLING = "pooling"     # what a pooling API's path runs as (RUNNER_OF_PATH)


@dataclass(frozen=True, slots=True)
class ContextLengthFilterParams:
    margin_tokens: int = 0

    def __post_init__(self) -> None:
        if self.margin_tokens < 0:
            raise ParamError("margin_tokens", "must be >= 0")


def required_context(request: RoutingRequest, margin_tokens: int = 0) -> int:
    """Tokens of context the request needs on a worker."""
    return request.context_prompt_tokens + least_output(request) + margin_tokens


def least_output(request: RoutingRequest) -> int:
    """The output tokens a window must leave room for: none for an embedding; else
    ``max_tokens`` (1 when not set: the worker then generates up to its limit)."""
    if RUNNER_OF_PATH.get(request.path) == POOLING:
        return 0
    output = request.max_tokens if request.max_tokens is not None else 1
    return output if output > 1 else 1


_max_model_len = attrgetter("max_model_len")


class ContextLengthFilter:
    def __init__(self, name: str, params: ContextLengthFilterParams) -> None:
        self.name = name
        self.margin_tokens = params.margin_tokens

    def filter(self, request: RoutingRequest, workers: Sequence[WorkerView],
               cycle: CycleState) -> Sequence[WorkerView]:
        if request.text_cuts:      # vLLM refuses a score's cut that is not below its window
            biggest = max(request.text_cuts)
            workers = [view for view in workers
                       if view.max_model_len <= 0 or biggest < view.max_model_len]
        cut = request.truncate_prompt_tokens
        if cut is not None:
            return _cut_to_fit(cut, request.context_prompt_tokens + self.margin_tokens, workers)
        needed = required_context(request, self.margin_tokens)
        if needed <= min(map(_max_model_len, workers), default=needed):   # all fit (in C)
            return list(workers)
        fitting = [view for view in workers
                   if view.max_model_len <= 0 or needed <= view.max_model_len]
        if fitting:
            return fitting
        if request.media_prompt_tokens:     # estimated media: only the text is certain
            needed -= request.media_prompt_tokens
            fitting = [view for view in workers if needed <= view.max_model_len]
            if fitting:
                return fitting
        prompt_only = (request.certain_context_tokens + min(1, least_output(request))
                       + self.margin_tokens)      # max_tokens clamped
        holding = [view for view in workers if prompt_only <= view.max_model_len]
        if not holding and self.margin_tokens:
            # the margin is for the router's count, not the engine's: a prompt that fits
            # without it is the engine's to judge (it counts exactly, in its own words)
            prompt_only -= self.margin_tokens
            holding = [view for view in workers if prompt_only <= view.max_model_len]
        if not holding:
            return _largest_to_count(request, workers)
        requested = request.max_tokens
        if requested is not None and least_output(request):
            # clamped only within the window: vLLM answers 400 for a longer max_tokens
            clamping = [view for view in holding if requested <= view.max_model_len]
            if clamping:
                return clamping
        return holding


def _largest_to_count(request: RoutingRequest,
                      workers: Sequence[WorkerView]) -> list[WorkerView]:
    """The workers of the largest window when the prompt's count is an estimate (their
    engine counts it exactly), else none."""
    attributes = request.attributes
    if not attributes.get(ESTIMATED_COUNT_KEY) or attributes.get(AT_LEAST_KEY):
        return []
    largest = max(map(_max_model_len, workers), default=0)
    if largest <= 0:
        return []
    return [view for view in workers if view.max_model_len == largest]


def _cut_to_fit(cut: int, needed: int, workers: Sequence[WorkerView]) -> list[WorkerView]:
    """The workers of a pooling request whose texts the engine cuts to ``cut`` tokens
    (``truncate_prompt_tokens``; -1: to each worker's own window): vLLM refuses a cut past
    its window, and serves the rest."""
    if cut < 0:
        return list(workers)
    needed = min(needed, cut)
    return [view for view in workers if view.max_model_len <= 0
            or (cut <= view.max_model_len and needed <= view.max_model_len)]


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "filter", ContextLengthFilterParams,
                      lambda params, ctx: ContextLengthFilter(ctx.name, params),
                      needs=("num_prompt_tokens",))
