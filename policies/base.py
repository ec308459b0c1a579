"""The plugin contracts of the routing pipeline and the values that flow through it.

A decision runs ``producers → rules → profile (filters → weighted scorers → picker)``.
Producers may be expensive (tokenizing, embedding) and run before the decision, possibly off
the event loop; everything after them is pure and synchronous: no I/O, no awaits, no
exceptions into the request path. The same objects run live (``router.director``) and in
virtual time (``sim``), so a policy decides identically in both for the same views.

Modelled on llm-d's scheduling framework (filter → scorer → picker over a shared
``CycleState``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from workers.models import WorkerView


@dataclass(slots=True)
class RoutingRequest:
    """One client request as the policies see it. Producers fill the ``produced`` fields."""

    request_id: str
    model: str
    path: str = "/v1/chat/completions"   # one of ROUTED_PATHS
    messages: Sequence[Mapping[str, Any]] | None = None
    tools: Sequence[Mapping[str, Any]] | None = None   # chat: the tools offered (in the prompt)
    prompt: Any = None   # completions: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = None
    stream: bool = False
    tenant: str | None = None            # API key / x-tenant header
    session: str | None = None           # x-session-id / user field
    user: str | None = None              # the body's ``user`` field
    headers: Mapping[str, str] = field(default_factory=dict)
    # the JSON body as the client sent it, to read, never to change (None in the simulator)
    body: Mapping[str, Any] | None = None
    body_bytes: int = 0                  # the body's size as received (0: not from one)
    arrival_time: float = 0.0            # monotonic seconds (virtual in the simulator)
    # a pooling request's ``truncate_prompt_tokens``: each text cut to that many tokens by the
    # engine (-1: to its window); None: whole
    truncate_prompt_tokens: int | None = None
    # a score's or a rerank's cut of each of its texts (``max_tokens_per_query`` on the
    # queries, ``max_tokens_per_doc`` on the documents; 0: whole), in the prompt's order
    text_cuts: Sequence[int] | None = None
    # --- produced before the decision -------------------------------------------------------
    prompt_token_ids: Sequence[int] | None = None
    num_prompt_tokens: int = 0
    # of num_prompt_tokens, those estimated for a chat's images, audio and video (the router
    # never decodes them): in the estimates, costs and preferred windows, never the reason a
    # request is refused (``certain_context_tokens``)
    media_prompt_tokens: int = 0
    # a batch (several prompts or embedding inputs): the tokens of its longest one, which is
    # what a context window must hold (each is served on its own); 0 for a single prompt
    longest_prompt_tokens: int = 0
    prompt_count: int = 1                # the prompts of a batch, each answered on its own
    choices: int = 1                     # sequences generated per prompt (n; best_of if more)
    returned_choices: int = 1            # ... of which answered (n): what usage counts
    block_hashes: dict[int, Sequence[int]] = field(default_factory=dict)   # block_size -> chain
    semantic_class: str | None = None
    predicted_output_tokens: int | None = None   # learnt from finished requests, <= max_tokens
    attributes: dict[str, Any] = field(default_factory=dict)   # free-form producer outputs

    @property
    def expected_output_tokens(self) -> int:
        """The tokens it should generate: the producers' prediction when there is one, else
        ``output_tokens_bound``."""
        predicted = self.predicted_output_tokens
        return predicted if predicted is not None else self.output_tokens_bound

    @property
    def context_prompt_tokens(self) -> int:
        """The prompt tokens one context window must hold: the longest of a batch's
        prompts, else the prompt's (its media's estimated tokens included)."""
        return self.longest_prompt_tokens or self.num_prompt_tokens

    @property
    def certain_context_tokens(self) -> int:
        """``context_prompt_tokens`` less what is only an estimate (a chat's media): what a
        window surely must hold, by which alone a request is refused (the worker refuses a
        prompt its window does not hold, on its own count of the media)."""
        return self.context_prompt_tokens - self.media_prompt_tokens

    @property
    def output_tokens_bound(self) -> int:
        """max_tokens if given, else 256: the answer's length when nothing else is known
        (without max_tokens vLLM may generate to the end of the window)."""
        return self.max_tokens if self.max_tokens is not None else 256

    @property
    def sequences(self) -> int:
        """The sequences generated: each prompt of a batch, ``choices`` times."""
        return self.prompt_count * self.choices

    @property
    def returned_sequences(self) -> int:
        """The sequences answered (``best_of`` keeps the best ``n``): an answer's
        ``completion_tokens`` is theirs together."""
        return self.prompt_count * self.returned_choices

    def output_tokens_within(self, max_model_len: int) -> int:
        """``expected_output_tokens`` as a worker with this context window serves them
        (``output_tokens_in_window``), for each sequence generated."""
        return self.sequences * output_tokens_in_window(
            self.expected_output_tokens, self.context_prompt_tokens, max_model_len)


# the request paths a decision is taken for (``RoutingRequest.path``; ``when: {path: ...}``),
# each with what its model must run as (vLLM's ``--runner``). The pooling APIs past
# embeddings are vLLM's own: scoring (``/score``, also served as ``/v1/score``), reranking
# (``/rerank``, ``/v1/rerank``, ``/v2/rerank``: Jina's and Cohere's shape), ``/pooling`` and
# ``/classify``; each path stays itself (a rule may name one), ``API_OF_PATH`` groups them
API_OF_PATH: Mapping[str, str] = MappingProxyType({
    "/v1/chat/completions": "chat", "/v1/completions": "completions",
    "/v1/embeddings": "embeddings", "/v1/responses": "responses", "/v1/messages": "messages",
    "/score": "score", "/v1/score": "score",
    "/rerank": "rerank", "/v1/rerank": "rerank", "/v2/rerank": "rerank",
    "/pooling": "pooling", "/classify": "classify"})
POOLING_APIS = frozenset({"embeddings", "score", "rerank", "pooling", "classify"})
RUNNER_OF_PATH: Mapping[str, str] = MappingProxyType({
    path: "pooling" if api in POOLING_APIS else "generate" for path, api in API_OF_PATH.items()})
ROUTED_PATHS = tuple(RUNNER_OF_PATH)


def is_token_ids(values: Iterable[Any]) -> bool:
    """Whether ``values`` holds token ids, at least one: every item an ``int``, no ``bool``
    (JSON's ``true`` is not a token). Checked by type in C: a client's million-token prompt
    costs milliseconds on the event loop, not tens of them."""
    return {*map(type, values)} == {int}


def per_sequence(completion_tokens: int, request: RoutingRequest) -> int:
    """An answer's ``completion_tokens`` (the sum over the sequences it returns) per sequence,
    at least 1: what one of them generated on average, the unit of ``max_tokens`` and of
    predictions."""
    sequences = request.returned_sequences
    if sequences == 1:
        return completion_tokens
    return max(1, round(completion_tokens / sequences))


def output_tokens_in_window(output_tokens: int, prompt_tokens: int, max_model_len: int) -> int:
    """The output tokens a worker serves: vLLM clamps max_tokens to what the prompt leaves of
    the context window (at least 1; a window of 0, unknown, clamps nothing)."""
    if max_model_len <= 0 or prompt_tokens + output_tokens <= max_model_len:
        return output_tokens
    return max(1, max_model_len - prompt_tokens)


class CycleState(dict[str, Any]):
    """Per-decision scratchpad shared by the plugins of one scheduling cycle.

    A dict whose ``read`` and ``write`` are its own ``get`` and item assignment: plugins read
    it some twenty times per decision, and a call into C costs less than a Python method."""

    __slots__ = ()

    if TYPE_CHECKING:
        def read(self, key: str, default: Any = None) -> Any: ...

        def write(self, key: str, value: Any) -> None: ...
    else:
        read = dict.get
        write = dict.__setitem__


@dataclass(frozen=True, slots=True)
class CandidateScore:
    """One candidate's weighted total and the raw score of every scorer (0..1)."""

    worker_id: str
    total: float
    scores: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a request goes and why."""

    request_id: str
    worker_id: str | None                # None: no candidate (the router answers 503)
    model: str                           # target model after rule rewrites
    profile: str
    rule: str | None
    reason: str                          # human-readable, also the x-kvroute-reason header
    candidates: Sequence[CandidateScore] = ()    # ranked by total; may be built lazily
    filtered_out: Mapping[str, str] = field(default_factory=dict)   # worker -> filter name
    attributes: Mapping[str, Any] = field(default_factory=dict)     # e.g. estimated ttft, cost


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """What the router (or the simulator) observed once a request finished."""

    request_id: str
    worker_id: str
    status: int                       # HTTP status; 200 for success
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None  # when the worker reports it
    ttft_s: float | None = None
    tpot_s: float | None = None       # mean inter-token time after the first token
    e2e_s: float | None = None


@runtime_checkable
class Producer(Protocol):
    """Computes request attributes before the decision. Pure CPU; may run in a thread."""

    name: str

    def produce(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> None: ...


@runtime_checkable
class Filter(Protocol):
    name: str

    def filter(self, request: RoutingRequest, workers: Sequence[WorkerView],
               cycle: CycleState) -> Sequence[WorkerView]: ...


@runtime_checkable
class Scorer(Protocol):
    name: str

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]: ...   # worker id -> [0, 1]


@runtime_checkable
class Picker(Protocol):
    name: str

    def pick(self, request: RoutingRequest, candidates: Sequence[CandidateScore],
             cycle: CycleState) -> CandidateScore: ...


@runtime_checkable
class RoutingObserver(Protocol):
    """Optional hooks for stateful plugins (prefix index, latency model, round-robin)."""

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None: ...

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None: ...
