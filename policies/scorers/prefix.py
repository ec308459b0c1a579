"""``prefix`` scorer: the share of the prompt each worker already holds in its prefix cache.

Score = cached prompt tokens / prompt tokens (0..1), counted as vLLM counts hits (whole
blocks from block 0, at least one token recomputed). Knowledge comes from the exact KV-event
index for workers whose stream is whole (``attach_exact_index``; the router and the simulator
attach one when KV events are on) and from the approximate index otherwise: every routed
request's block hashes are inserted for its worker (``on_routed``), in a per-worker LRU sized
from that worker's ``num_gpu_blocks`` (``policies.prefix.approximate``), and so are those
other router replicas routed (``learn_routed``, fed through Redis by the state store).

The per-worker counts are also left in the decision's ``CycleState`` (``prefix.match``) for
the ``estimated-time`` and ``cost`` scorers and the ``slo-cost`` picker, and the chosen
worker's count becomes ``Decision.attributes["prefix_match_tokens"]``, the longest count of
any candidate ``Decision.attributes["prefix_best_tokens"]`` (the router's
``kvroute_prefix_known_*_tokens`` counters compare the two). Declare ``prefix``
before those plugins. Needs ``block_hashes`` (the ``blocks`` producer is added automatically).

```yaml
scorers:
  - type: prefix
    weight: 2
    params:
      default_capacity_blocks: 16384   # LRU size for workers whose KV capacity is unknown
      use_kv_events: true              # prefer the exact index when one is attached
      inflight_blocks: true            # with it, count the blocks of unfinished requests too
```

With KV events, a prompt's blocks are reported only as its prefill computes them, so a
request with the same prefix arriving meanwhile would find them nowhere. ``inflight_blocks``
closes that window: for a worker followed by events, the cached prefix is the longer of what
the events say and what the requests routed there and not yet finished hold (their blocks
cannot be evicted before they end; ``policies.prefix.inflight``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from policies.base import CycleState, Decision, RequestOutcome, RoutingRequest
from policies.candidate_index import CandidateIndex, candidate_index
from policies.errors import ParamError
from policies.latency.attributes import LazyAttribute, record_attribute
from policies.prefix.approximate import ApproximatePrefixIndex, routed_chain
from policies.prefix.inflight import InflightBlocks
from policies.prefix.matching import MATCH_KEY, match_prefix
from policies.registry import PluginRegistry
from workers.kv_events.exact_index import ExactPrefixIndex
from workers.models import WorkerView

TYPE_NAME = "prefix"
ATTRIBUTE = "prefix_match_tokens"
BEST_ATTRIBUTE = "prefix_best_tokens"
# another replica's routes to a worker whose block size no decision has read yet, kept until
# one does (a replica starting reads the routes stream before its first decision)
MAX_UNSIZED_ROUTES = 2_000


@dataclass(frozen=True, slots=True)
class PrefixScorerParams:
    default_capacity_blocks: int = 16384
    use_kv_events: bool = True
    inflight_blocks: bool = True

    def __post_init__(self) -> None:
        if self.default_capacity_blocks < 1:
            raise ParamError("default_capacity_blocks", "must be >= 1")


class PrefixScorer:
    """Scores prefix-cache overlap and keeps the approximate index current."""

    clamped_column = True      # score_column: cached / prompt tokens, in [0, 1)

    def __init__(self, name: str, params: PrefixScorerParams) -> None:
        self.name = name
        self.use_kv_events = params.use_kv_events
        self.index = ApproximatePrefixIndex(params.default_capacity_blocks)
        self.exact: ExactPrefixIndex | None = None
        self.inflight: InflightBlocks | None = InflightBlocks() if params.inflight_blocks else None
        self._block_size: dict[str, int] = {}
        self._gpu_blocks: dict[str, int] = {}
        # routes learnt from other replicas for workers of no known block size yet, by worker
        self._unsized: dict[str, deque[Mapping[int, Sequence[int]]]] = {}
        # the candidates and pool sizes _track last brought into the LRUs
        self._tracked_index: CandidateIndex | None = None
        self._tracked_blocks: list[int] = []

    def attach_exact_index(self, index: ExactPrefixIndex | None) -> None:
        """Use KV-event knowledge for workers whose stream is whole (None: detach)."""
        self.exact = index if self.use_kv_events else None

    def inherit_state(self, previous: object) -> None:
        """Keep what the previous configuration's scorer learnt (hot reload)."""
        if isinstance(previous, PrefixScorer):
            self.index = previous.index
            self.exact = previous.exact if self.use_kv_events else None
            if self.inflight is not None and previous.inflight is not None:
                self.inflight = previous.inflight
            self._block_size = previous._block_size
            self._gpu_blocks = previous._gpu_blocks
            self._unsized = previous._unsized
            self._tracked_index = None

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        index = candidate_index(cycle, workers)
        return dict(zip(index.ids, self.score_column(request, workers, cycle), strict=True))

    def score_column(self, request: RoutingRequest, workers: Sequence[WorkerView],
                     cycle: CycleState) -> list[float]:
        """``score`` as a list in view order (no per-worker dict)."""
        index = candidate_index(cycle, workers)
        self._track(workers, index)
        match = match_prefix(request, workers, self.index, self.exact, index.ids,
                             index.position, self.inflight)
        cycle.write(MATCH_KEY, match)
        prompt = max(1, request.num_prompt_tokens)
        tokens = match.tokens
        position = index.position
        column = [0.0] * len(index.ids)
        for worker_id, count in tokens.items():
            column[position[worker_id]] = count / prompt
        record_attribute(cycle, ATTRIBUTE, LazyAttribute(position, lambda w: tokens.get(w, 0)))
        record_attribute(cycle, BEST_ATTRIBUTE,
                         LazyAttribute(position, lambda w: max(tokens.values(), default=0)))
        return column

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        worker_id = decision.worker_id
        if worker_id is None:
            return
        chain = routed_chain(self._block_size, request, worker_id)
        if not chain:
            return
        self.index.insert(worker_id, chain)
        if self.exact is not None and self.inflight is not None:
            self.inflight.add(request.request_id, worker_id, chain)

    def learn_routed(self, worker_id: str, block_hashes: Mapping[int, Sequence[int]]) -> None:
        """Another router replica routed a prompt of these hashes to ``worker_id``
        (``PolicyEngine.learn_routed``): its history learns it as its own ``on_routed`` would
        (not the in-flight blocks, which the other replica tracks until its request ends).
        For a worker whose block size no decision has read yet, the hashes are kept until one
        does (``_track``), to be learnt at its size: taken at 16, a worker of another size
        learnt nothing, or hashes of the wrong size that stayed."""
        size = self._block_size.get(worker_id)
        if size is None:
            kept = self._unsized.get(worker_id)
            if kept is None:
                kept = self._unsized[worker_id] = deque(maxlen=MAX_UNSIZED_ROUTES)
            kept.append(block_hashes)
            return
        chain = block_hashes.get(size)
        if chain:
            self.index.insert(worker_id, chain)

    def forget_worker(self, worker_id: str) -> None:
        """Its engine restarted, or it left the fleet, or another server took its id
        (``PolicyEngine.forget_worker``): the routing history of what it caches is void, and
        so are its pool's size and block size, which the next decision that sees it reads
        again (its index slot is freed: a fleet whose workers take new ids kept a slot, and
        a wider bit mask on every shared block, per id ever seen). The KV-event index is
        the router's feed's to drop."""
        self.index.remove_worker(worker_id)
        self._gpu_blocks.pop(worker_id, None)
        self._block_size.pop(worker_id, None)
        self._unsized.pop(worker_id, None)
        self._tracked_index = None

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        if self.inflight is not None:
            self.inflight.remove(request.request_id, outcome.worker_id)

    def _track(self, workers: Sequence[WorkerView], index: CandidateIndex) -> None:
        """Resize the LRUs of workers whose ``num_gpu_blocks`` changed (or are new); a worker
        whose block size changed (an engine started again with another ``--block-size``)
        loses its history, which is of hashes at the former size. (A block size changes
        only with a new engine, which ``forget_worker`` is told of: the fast path below,
        taken while the candidates and their pools repeat, need not read it.)"""
        blocks = list(map(_num_gpu_blocks, workers))
        if index is self._tracked_index and blocks == self._tracked_blocks:
            return      # the same workers with the same pools as last time: nothing to do
        gpu_blocks, block_size = self._gpu_blocks, self._block_size
        for view, worker_id, count in zip(workers, index.ids, blocks, strict=True):
            size = view.block_size
            known_size = block_size.get(worker_id)
            if gpu_blocks.get(worker_id) == count and known_size == size:
                continue
            if known_size is not None and known_size != size:
                self.index.clear_worker(worker_id)
            gpu_blocks[worker_id] = count
            block_size[worker_id] = size
            self.index.set_capacity(worker_id, count)
            if known_size is None and worker_id in self._unsized:
                for hashes in self._unsized.pop(worker_id):    # learnt at its size now
                    chain = hashes.get(size)
                    if chain:
                        self.index.insert(worker_id, chain)
        self._tracked_index, self._tracked_blocks = index, blocks


_num_gpu_blocks = attrgetter("num_gpu_blocks")


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", PrefixScorerParams,
                      lambda params, ctx: PrefixScorer(ctx.name, params),
                      needs=("block_hashes",))
