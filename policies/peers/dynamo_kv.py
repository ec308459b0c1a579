"""Dynamo's KV router: overlap blocks against active blocks, argmin cost (softmax if warm).

Source rule (``docs/components/router/router-concepts.md``; peer-routers.md §2.4)::

    raw_prefill_blocks      = active_prefill_blocks + incoming_prompt_blocks
    adjusted_prefill_blocks = max(raw_prefill_blocks - overlap_blocks * overlap_score_credit, 0)
    decode_blocks           = active_decode_blocks + incoming_active_blocks
    cost                    = prefill_load_scale * adjusted_prefill_blocks + decode_blocks
    pick argmin cost; router_temperature > 0: softmax sampling over normalised cost logits

Defaults: overlap credit 1.0, prefill_load_scale 1.0, router_temperature 0 (deterministic),
approximate mode (``--no-kv-events``): the router predicts each worker's cache from its own
routing decisions, each block expiring ``ttl_secs`` (120) after it was last routed. Blocks are
the worker's ``block_size``; their hashes come from the ``blocks`` producer when it ran, else
are computed here. The slot manager's active load is kept router-side: a routed request adds
its uncached prompt blocks to ``active_prefill_blocks`` and its prompt blocks to
``active_decode_blocks`` until it completes (Dynamo releases the prefill share at the first
token; the policy layer sees only routing and completion, so prefill load is held a little
longer here). ``incoming_active_blocks`` is the request's prompt blocks.

Scores are ``(max_cost - cost) / (max_cost - min_cost)`` (all equal: 1.0); with
``dynamo-softmax`` as picker the temperature behaves as Dynamo's::

    scorers: [{type: dynamo-kv-cost, weight: 1, params: {overlap_score_credit: 1.0}}]
    picker: {type: dynamo-softmax, params: {temperature: 0.0}}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.base import CycleState, Decision, RequestOutcome, RoutingRequest
from policies.cycle_keys import record_worker_attribute
from policies.errors import ParamError
from policies.peers.least_requests import min_max_inverse
from policies.peers.llm_d import chained_block_hashes
from policies.peers.prompt import prompt_units
from policies.registry import PluginRegistry
from workers.models import WorkerView

TYPE_NAME = "dynamo-kv-cost"
_PRUNE_EVERY = 1024


@dataclass(frozen=True, slots=True)
class _ActiveSequence:
    worker_id: str
    prefill_blocks: float
    blocks: int


class ApproxKvIndexer:
    """Blocks each worker is predicted to hold, with an expiry time per block."""

    __slots__ = ("_inserts", "_ttl", "_workers")

    def __init__(self, ttl_secs: float) -> None:
        self._ttl = ttl_secs
        self._workers: dict[str, dict[int, float]] = {}
        self._inserts = 0

    def overlap(self, worker_id: str, hashes: Sequence[int], now: float) -> int:
        held = self._workers.get(worker_id)
        if not held:
            return 0
        count = 0
        for block_hash in hashes:
            expiry = held.get(block_hash)
            if expiry is None or expiry <= now:
                break
            count += 1
        return count

    def record(self, worker_id: str, hashes: Sequence[int], now: float) -> None:
        held = self._workers.setdefault(worker_id, {})
        expiry = now + self._ttl
        for block_hash in hashes:
            held[block_hash] = expiry
        self._inserts += 1
        if self._inserts % _PRUNE_EVERY == 0:
            for blocks in self._workers.values():
                for block_hash in [h for h, e in blocks.items() if e <= now]:
                    del blocks[block_hash]


@dataclass(frozen=True, slots=True)
class DynamoKvParams:
    overlap_score_credit: float = 1.0
    prefill_load_scale: float = 1.0
    ttl_secs: float = 120.0

    def __post_init__(self) -> None:
        for field in ("overlap_score_credit", "prefill_load_scale"):
            if getattr(self, field) < 0:
                raise ParamError(field, "must be >= 0")
        if self.ttl_secs <= 0:
            raise ParamError("ttl_secs", "must be > 0")


class DynamoKvCostScorer:
    def __init__(self, params: DynamoKvParams | None = None, name: str = TYPE_NAME) -> None:
        params = params or DynamoKvParams()
        self.name = name
        self.overlap_score_credit = params.overlap_score_credit
        self.prefill_load_scale = params.prefill_load_scale
        self.indexer = ApproxKvIndexer(params.ttl_secs)
        self._active: dict[str, _ActiveSequence] = {}
        self._prefill_blocks: dict[str, float] = {}
        self._decode_blocks: dict[str, int] = {}
        self._block_sizes: dict[str, int] = {}
        self._memo: tuple[str, int, Sequence[int]] | None = None   # last request's hashes

    def _hashes(self, request: RoutingRequest, block_size: int) -> Sequence[int]:
        produced = request.block_hashes.get(block_size)
        if produced is not None:
            return produced
        memo = self._memo
        if memo is not None and memo[0] == request.request_id and memo[1] == block_size:
            return memo[2]
        hashes = chained_block_hashes(request.model, prompt_units(request), block_size,
                                      max_blocks=1 << 30)
        self._memo = (request.request_id, block_size, hashes)
        return hashes

    def _prompt_tokens(self, request: RoutingRequest) -> int:
        return request.num_prompt_tokens or len(prompt_units(request))

    def costs(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState | None = None) -> dict[str, float]:
        tokens = self._prompt_tokens(request)
        result: dict[str, float] = {}
        for view in workers:
            block_size = self._block_sizes[view.id] = max(1, view.block_size)
            overlap = self.indexer.overlap(view.id, self._hashes(request, block_size),
                                           request.arrival_time)
            if cycle is not None and overlap:
                record_worker_attribute(cycle, "prefix_match_tokens", view.id,
                                        overlap * block_size)
            incoming_prompt_blocks = tokens / block_size
            raw_prefill = self._prefill_blocks.get(view.id, 0.0) + incoming_prompt_blocks
            adjusted_prefill = max(raw_prefill - overlap * self.overlap_score_credit, 0.0)
            decode = self._decode_blocks.get(view.id, 0) + math.ceil(tokens / block_size)
            result[view.id] = self.prefill_load_scale * adjusted_prefill + decode
        return result

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        costs = self.costs(request, workers, cycle)
        return min_max_inverse(costs)

    def inherit_state(self, previous: object) -> None:
        """On a routing reload, keep the predicted cache and the active load."""
        if isinstance(previous, DynamoKvCostScorer):
            self.indexer = previous.indexer
            self._active = previous._active
            self._prefill_blocks = previous._prefill_blocks
            self._decode_blocks = previous._decode_blocks
            self._block_sizes = previous._block_sizes

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        worker_id = decision.worker_id
        if worker_id is None:
            return
        block_size = self._block_sizes.get(worker_id, 16)
        hashes = self._hashes(request, block_size)
        now = request.arrival_time
        overlap = self.indexer.overlap(worker_id, hashes, now)
        tokens = self._prompt_tokens(request)
        sequence = _ActiveSequence(worker_id, max(tokens / block_size - overlap, 0.0),
                                   math.ceil(tokens / block_size))
        self._release(request.request_id)
        self._active[request.request_id] = sequence
        self._prefill_blocks[worker_id] = (self._prefill_blocks.get(worker_id, 0.0)
                                           + sequence.prefill_blocks)
        self._decode_blocks[worker_id] = self._decode_blocks.get(worker_id, 0) + sequence.blocks
        self.indexer.record(worker_id, hashes, now)

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        self._release(request.request_id)

    def active_blocks(self, worker_id: str) -> tuple[float, int]:
        """(active prefill blocks, active decode blocks) the router holds for a worker."""
        return self._prefill_blocks.get(worker_id, 0.0), self._decode_blocks.get(worker_id, 0)

    def _release(self, request_id: str) -> None:
        sequence = self._active.pop(request_id, None)
        if sequence is None:
            return
        worker_id = sequence.worker_id
        self._prefill_blocks[worker_id] = max(
            0.0, self._prefill_blocks.get(worker_id, 0.0) - sequence.prefill_blocks)
        self._decode_blocks[worker_id] = max(
            0, self._decode_blocks.get(worker_id, 0) - sequence.blocks)


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", DynamoKvParams,
                      lambda params, ctx: DynamoKvCostScorer(params, ctx.name),
                      needs=("prompt_token_ids", "num_prompt_tokens"))
