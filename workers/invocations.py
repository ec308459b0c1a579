"""SageMaker's ``POST /invocations``: which API a body is, as vLLM takes it.

vLLM serves SageMaker's hosting contract (``GET``/``POST /ping`` and ``POST /invocations``).
Its ``/invocations`` takes a body as the first of the server's request types it validates
as: for a model run for generation, a chat completion (``messages``), else a completion
(whose ``prompt`` its type leaves optional: a body with neither is the completion's 400,
"Either prompt or prompt_embeds must be provided"); for a pooling model, an embedding
(``input`` or ``messages``; a classifier's classification), a rerank (``query`` and
``documents``), a score (two sides: ``data_1``/``data_2``, ``queries`` with ``documents`` or
``items``, ``text_1``/``text_2``), then a pooling request (an IO processor plugin's
``data``). A pooling model's body none takes is a 400, "Cannot find suitable handler for
request. Expected one of: [...]".

``invocation_path`` reads the body's shape only (the fields each type requires): a body of
the right shape with a wrong field is then refused by that API's own check, in its words,
where vLLM, whose types fail on any wrong field, says it found no handler. The router routes
an ``/invocations`` body as the API it names (``router.protocol.parse_request``) and sends it
to the chosen worker's own ``/invocations``; the emulator answers it with that API's handler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

INVOCATIONS_PATH = "/invocations"

# the request types named when none takes a body, by what the model runs as (vLLM lists
# those of the tasks its model serves, a union type written out)
_GENERATION_TYPES = ("ChatCompletionRequest", "CompletionRequest")
_POOLING_TYPES = ("EmbeddingRequest", "RerankRequest", "ScoreRequest", "PoolingRequest")
# the two sides of a score request, each way vLLM's ScoreRequest takes them
_SCORE_SIDES = (("data_1", "data_2"), ("queries", "documents"), ("queries", "items"),
                ("text_1", "text_2"))


def invocation_path(data: Mapping[str, Any], runners: frozenset[str]) -> str | None:
    """The API path an ``/invocations`` body is, for a model run as ``runners``
    (``generate``, ``pooling``; empty: a model no worker serves, taken as either); None
    when no type takes it (``no_handler_message``)."""
    generates = not runners or "generate" in runners
    pools = not runners or "pooling" in runners

    def given(*names: str) -> bool:
        return all(data.get(name) is not None for name in names)

    if generates and given("messages"):
        return "/v1/chat/completions"
    if generates and (given("prompt") or given("prompt_embeds")):
        return "/v1/completions"
    if pools:
        if given("input") or given("messages"):
            return "/v1/embeddings"
        if given("query", "documents"):
            return "/rerank"
        if any(given(*sides) for sides in _SCORE_SIDES):
            return "/score"
        if given("data"):
            return "/pooling"
    # a completion's type takes a body without a prompt: its handler refuses it
    return "/v1/completions" if generates else None


def no_handler_message(runners: frozenset[str]) -> str:
    """vLLM's words for an ``/invocations`` body no request type takes (a pooling model's:
    a generative model's takes any as a completion)."""
    generates = not runners or "generate" in runners
    pools = not runners or "pooling" in runners
    expected = (_GENERATION_TYPES if generates else ()) + (_POOLING_TYPES if pools else ())
    return f"Cannot find suitable handler for request. Expected one of: {list(expected)}"
