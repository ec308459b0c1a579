"""``prefix`` scorer: the share of the prompt each worker already holds in its prefix cache.

Score = cached prompt tokens / prompt tokens (0..1), counted as vLLM counts hits (whole
blocks from block 0, at least one token recomputed). Knowledge comes from the exact KV-event
index for workers whose stream is whole (``attach_exact_index``; the router and the simulator
attach one when KV events are on) and from the approximate index otherwise: every routed
request's block hashes are inserted for its worker (``on_routed``), in a per-worker LRU sized
from that worker's ``num_gpu_blocks`` (``policies.prefix.approximate``).

The per-worker counts are also left in the decision's ``CycleState`` (``prefix.match``) for
the ``estimated-time`` and ``cost`` scorers and the ``slo-cost`` picker, and the chosen
worker's count becomes ``Decision.attributes["prefix_match_tokens"]``. Declare ``prefix``
before those plugins. Needs ``block_hashes`` (the ``blocks`` producer is added automatically).

```yaml
scorers:
  - type: prefix
    weight: 2
    params:
      default_capacity_blocks: 16384   # LRU size for workers whose KV capacity is unknown
      use_kv_events: true              # prefer the exact index when one is attached
```
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.base import CycleState, Decision, RequestOutcome, RoutingRequest
from policies.errors import ParamError
from policies.latency.attributes import LazyAttribute, record_attribute
from policies.prefix.approximate import ApproximatePrefixIndex, remember_routed
from policies.prefix.matching import MATCH_KEY, match_prefix
from policies.registry import PluginRegistry
from workers.kv_events.exact_index import ExactPrefixIndex
from workers.models import WorkerView

TYPE_NAME = "prefix"
ATTRIBUTE = "prefix_match_tokens"


@dataclass(frozen=True, slots=True)
class PrefixScorerParams:
    default_capacity_blocks: int = 16384
    use_kv_events: bool = True

    def __post_init__(self) -> None:
        if self.default_capacity_blocks < 1:
            raise ParamError("default_capacity_blocks", "must be >= 1")


class PrefixScorer:
    """Scores prefix-cache overlap and keeps the approximate index current."""

    def __init__(self, name: str, params: PrefixScorerParams) -> None:
        self.name = name
        self.use_kv_events = params.use_kv_events
        self.index = ApproximatePrefixIndex(params.default_capacity_blocks)
        self.exact: ExactPrefixIndex | None = None
        self._block_size: dict[str, int] = {}
        self._gpu_blocks: dict[str, int] = {}

    def attach_exact_index(self, index: ExactPrefixIndex | None) -> None:
        """Use KV-event knowledge for workers whose stream is whole (None: detach)."""
        self.exact = index if self.use_kv_events else None

    def inherit_state(self, previous: object) -> None:
        """Keep what the previous configuration's scorer learnt (hot reload)."""
        if isinstance(previous, PrefixScorer):
            self.index = previous.index
            self.exact = previous.exact if self.use_kv_events else None
            self._block_size = previous._block_size
            self._gpu_blocks = previous._gpu_blocks

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        ids = [view.info.id for view in workers]
        return dict(zip(ids, self._column(request, workers, cycle, ids), strict=True))

    def score_column(self, request: RoutingRequest, workers: Sequence[WorkerView],
                     cycle: CycleState) -> list[float]:
        """``score`` as a list in view order (no per-worker dict)."""
        return self._column(request, workers, cycle, [view.info.id for view in workers])

    def _column(self, request: RoutingRequest, workers: Sequence[WorkerView],
                cycle: CycleState, ids: list[str]) -> list[float]:
        self._track(workers, ids)
        match = match_prefix(request, workers, self.index, self.exact, ids)
        cycle.write(MATCH_KEY, match)
        prompt = max(1, request.num_prompt_tokens)
        tokens = match.tokens
        position = dict(zip(ids, range(len(ids)), strict=True))
        column = [0.0] * len(ids)
        for worker_id, count in tokens.items():
            column[position[worker_id]] = count / prompt
        record_attribute(cycle, ATTRIBUTE, LazyAttribute(position, lambda w: tokens.get(w, 0)))
        return column

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        remember_routed(self.index, self._block_size, request, decision.worker_id)

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        return None

    def _track(self, workers: Sequence[WorkerView], ids: list[str]) -> None:
        """Resize the LRUs of workers whose ``num_gpu_blocks`` changed (or are new)."""
        blocks = [view.num_gpu_blocks for view in workers]
        if blocks == list(map(self._gpu_blocks.get, ids)):
            return
        for view, worker_id, count in zip(workers, ids, blocks, strict=True):
            if self._gpu_blocks.get(worker_id) != count:
                self._gpu_blocks[worker_id] = count
                self._block_size[worker_id] = view.block_size
                self.index.set_capacity(worker_id, count)


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", PrefixScorerParams,
                      lambda params, ctx: PrefixScorer(ctx.name, params),
                      needs=("block_hashes",))
