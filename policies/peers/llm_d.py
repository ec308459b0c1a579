"""llm-d's built-in default scheduling profile: queue + KV-utilisation + prefix scorers.

Source (``pkg/epp/config/loader/defaults.go`` and the scorer plugins; peer-routers.md §2.3):
``queue-scorer`` weight 2, ``kv-cache-utilization-scorer`` weight 2, ``prefix-cache-scorer``
weight 3, ``max-score-picker`` (random tie-break), one profile.

* queue: ``(maxQ - q) / (maxQ - minQ)`` over the candidates' waiting queues; all equal: 1.0.
* KV utilisation: ``1 - kv_usage``.
* prefix: ``matched_blocks / total_blocks`` from the approximate prefix producer. The prompt is
  cut into blocks of ``block_size_tokens`` (default 16) token ids, or ``4 x`` that many
  characters when no token ids were produced (llm-d's ``averageCharactersPerToken``), at most
  ``max_prefix_blocks`` (256) blocks, each hash chained on the previous one and the first on
  the model name (llm-d uses xxhash64; only equality matters here). On routing, the hashes are
  recorded in the chosen worker's LRU of ``lru_capacity_per_server`` (31,250) blocks.

YAML (the ``llm-d-default`` preset)::

    scorers:
      - {type: llm-d-queue-scorer, weight: 2}
      - {type: llm-d-kv-cache-utilization-scorer, weight: 2}
      - {type: llm-d-prefix-cache-scorer, weight: 3,
         params: {block_size_tokens: 16, max_prefix_blocks: 256, lru_capacity_per_server: 31250}}
    picker: {type: max-score}
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.base import CycleState, Decision, RequestOutcome, RoutingRequest
from policies.cycle_keys import record_worker_attribute
from policies.errors import ParamError
from policies.peers.block_lru_index import BlockLruIndex
from policies.peers.least_requests import min_max_inverse
from policies.peers.prompt import prompt_text
from policies.registry import PluginRegistry
from workers.models import WorkerView

AVERAGE_CHARACTERS_PER_TOKEN = 4
QUEUE_TYPE = "llm-d-queue-scorer"
KV_TYPE = "llm-d-kv-cache-utilization-scorer"
PREFIX_TYPE = "llm-d-prefix-cache-scorer"


@dataclass(frozen=True, slots=True)
class NoParams:
    """No parameters."""


@dataclass(frozen=True, slots=True)
class PrefixCacheParams:
    block_size_tokens: int = 16
    max_prefix_blocks: int = 256
    lru_capacity_per_server: int = 31250

    def __post_init__(self) -> None:
        for field in ("block_size_tokens", "max_prefix_blocks", "lru_capacity_per_server"):
            if getattr(self, field) <= 0:
                raise ParamError(field, "must be > 0")


class QueueScorer:
    def __init__(self, name: str = QUEUE_TYPE) -> None:
        self.name = name

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        return min_max_inverse({view.id: float(view.waiting) for view in workers})


class KvCacheUtilizationScorer:
    def __init__(self, name: str = KV_TYPE) -> None:
        self.name = name

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        return {view.id: min(1.0, max(0.0, 1.0 - view.kv_usage)) for view in workers}


def chained_block_hashes(model: str, units: Sequence[int] | str, block_size: int,
                         max_blocks: int) -> list[int]:
    """Hashes of the full blocks of ``units``, each chained on its predecessor."""
    previous = zlib.crc32(model.encode())
    hashes: list[int] = []
    for start in range(0, len(units) - block_size + 1, block_size):
        if len(hashes) >= max_blocks:
            break
        previous = hash((previous, tuple(units[start:start + block_size])))
        hashes.append(previous)
    return hashes


class PrefixCacheScorer:
    def __init__(self, params: PrefixCacheParams | None = None,
                 name: str = PREFIX_TYPE) -> None:
        params = params or PrefixCacheParams()
        self.name = name
        self.block_size_tokens = params.block_size_tokens
        self.max_prefix_blocks = params.max_prefix_blocks
        self.index = BlockLruIndex(params.lru_capacity_per_server)

    def hashes(self, request: RoutingRequest) -> list[int]:
        if request.prompt_token_ids is not None:
            return chained_block_hashes(request.model, request.prompt_token_ids,
                                        self.block_size_tokens, self.max_prefix_blocks)
        return chained_block_hashes(request.model, prompt_text(request),
                                    self.block_size_tokens * AVERAGE_CHARACTERS_PER_TOKEN,
                                    self.max_prefix_blocks)

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        hashes = self.hashes(request)
        if not hashes:
            return {view.id: 0.0 for view in workers}
        matched = self.index.match_blocks(hashes)
        per_block = (self.block_size_tokens if request.prompt_token_ids is not None
                     else self.block_size_tokens * AVERAGE_CHARACTERS_PER_TOKEN)
        for view in workers:
            if view.id in matched:
                record_worker_attribute(cycle, "prefix_match_tokens", view.id,
                                        matched[view.id] * per_block)
        return {view.id: matched.get(view.id, 0) / len(hashes) for view in workers}

    def inherit_state(self, previous: object) -> None:
        """On a routing reload, keep the previous index when the block size is unchanged."""
        if (isinstance(previous, PrefixCacheScorer)
                and previous.block_size_tokens == self.block_size_tokens):
            self.index = previous.index

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        if decision.worker_id is not None:
            self.index.add(self.hashes(request), decision.worker_id)

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        """The approximate index forgets only by LRU, never on completion."""


def register(registry: PluginRegistry) -> None:
    registry.register(QUEUE_TYPE, "scorer", NoParams, lambda params, ctx: QueueScorer(ctx.name))
    registry.register(KV_TYPE, "scorer", NoParams,
                      lambda params, ctx: KvCacheUtilizationScorer(ctx.name))
    registry.register(PREFIX_TYPE, "scorer", PrefixCacheParams,
                      lambda params, ctx: PrefixCacheScorer(params, ctx.name),
                      needs=("prompt_token_ids",))
