"""``prefix-affinity`` scorer: keep a prompt family on the worker it was routed to before.

Like ``prefix``'s approximate index, every routed request's block hashes are remembered for
its worker, but each worker's memory holds ``memory_factor`` times its KV capacity
(``num_gpu_blocks``), so a family stays attached to its worker after that worker's cache has
evicted it. Score = leading blocks of the prompt remembered for the worker / the prompt's full
blocks (0..1).

Why: under cache pressure ``prefix`` alone (an estimate of what is cached now) loses a family
whose blocks were just evicted everywhere, and the next request goes wherever the balancing
terms say; the family then moves between workers and both caches hold it. Staying on the
family's worker costs the same one refill but keeps each worker's working set to its own
families (on the workload of ``prefix-anchors.md`` with 40-block caches, the tenant-pinned
oracle beats every policy that moves tenants). Pair it with ``routed-share`` for placing new
families, and ``prefix`` for what is cached now.

```yaml
scorers:
  - type: prefix-affinity
    weight: 2.0
    params: {memory_factor: 8.0, default_capacity_blocks: 16384}
```
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.base import CycleState, Decision, RequestOutcome, RoutingRequest
from policies.errors import ParamError
from policies.prefix.approximate import NULL_BLOCKS, ApproximatePrefixIndex, remember_routed
from policies.registry import PluginRegistry
from workers.models import WorkerView

TYPE_NAME = "prefix-affinity"


@dataclass(frozen=True, slots=True)
class PrefixAffinityParams:
    memory_factor: float = 8.0
    default_capacity_blocks: int = 16384

    def __post_init__(self) -> None:
        if self.memory_factor <= 0:
            raise ParamError("memory_factor", "must be > 0")
        if self.default_capacity_blocks < 1:
            raise ParamError("default_capacity_blocks", "must be >= 1")


class PrefixAffinityScorer:
    def __init__(self, name: str, params: PrefixAffinityParams) -> None:
        self.name = name
        self.memory_factor = params.memory_factor
        self.default_capacity = params.default_capacity_blocks
        self.index = ApproximatePrefixIndex(params.default_capacity_blocks)
        self._gpu_blocks: dict[str, int] = {}
        self._block_size: dict[str, int] = {}

    def inherit_state(self, previous: object) -> None:
        """Keep the remembered placements across a configuration reload."""
        if isinstance(previous, PrefixAffinityScorer):
            self.index = previous.index
            self._gpu_blocks = previous._gpu_blocks
            self._block_size = previous._block_size

    def memory_blocks(self, num_gpu_blocks: int) -> int:
        """Blocks remembered for a worker with this KV pool (its null block excluded)."""
        if num_gpu_blocks <= NULL_BLOCKS:
            return self.default_capacity
        return max(1, round(self.memory_factor * (num_gpu_blocks - NULL_BLOCKS)))

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        scores = dict.fromkeys((view.id for view in workers), 0.0)
        by_size: dict[int, list[str]] = {}
        for view in workers:
            self._track(view)
            by_size.setdefault(view.block_size, []).append(view.id)
        for block_size, ids in by_size.items():
            chain = request.block_hashes.get(block_size)
            if chain:
                for worker_id, blocks in self.index.match(chain, ids).items():
                    scores[worker_id] = blocks / len(chain)
        return scores

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        remember_routed(self.index, self._block_size, request, decision.worker_id)

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        return None

    def _track(self, view: WorkerView) -> None:
        if self._gpu_blocks.get(view.id) != view.num_gpu_blocks:
            self._gpu_blocks[view.id] = view.num_gpu_blocks
            self._block_size[view.id] = view.block_size
            # set_capacity takes a pool size and removes the null block itself
            self.index.set_capacity(view.id, self.memory_blocks(view.num_gpu_blocks)
                                    + NULL_BLOCKS)


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", PrefixAffinityParams,
                      lambda params, ctx: PrefixAffinityScorer(ctx.name, params),
                      needs=("block_hashes",))
