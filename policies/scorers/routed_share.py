"""``routed-share`` scorer: prefer workers that recently received less of the traffic.

Each routed request adds its prompt tokens (``unit: tokens``, default) or 1 (``unit:
requests``) to its worker's load, and every load decays by half after ``half_life_requests``
further routed requests (fleet-wide). With ``unit: families`` a worker's load is the number of
distinct prompt families (prompts sharing their first full block) routed to it within the
last ``family_window_requests`` routed requests, plus its decayed token share (0..1) to break
ties. Score = ``1 - load / max load`` over the candidates (all 1 while nothing was routed).

Why: with the ``prefix`` scorer, a prompt family that no worker holds yet (a new tenant's
system prompt) goes wherever the tie-breaker sends it, and then stays there. Over a few such
placements the families can pile up on one worker: that worker's cache overflows and evicts
its own prefixes while the other's idles (sglang-router ``cache_aware`` split 8 tenants 5/3 on
the workload of ``prefix-anchors.md``). This term sends new families to the worker with the
smallest recent share, so each worker's resident working set stays near its fair part of the
fleet's cache (``families`` counts a new family at once, where its traffic would take a while
to show in a token share), while a weight below the affinity scorers' (``prefix``,
``prefix-affinity``) keeps families where their blocks are.

```yaml
scorers:
  - type: prefix
    weight: 2.0
  - type: routed-share
    weight: 1.0
    params: {unit: families, half_life_requests: 64, family_window_requests: 96}
```
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from policies.base import CycleState, Decision, RequestOutcome, RoutingRequest
from policies.errors import ParamError
from policies.registry import PluginRegistry
from workers.models import WorkerView

TYPE_NAME = "routed-share"
_RESCALE_AT = 1e150


@dataclass(frozen=True, slots=True)
class RoutedShareParams:
    unit: Literal["tokens", "requests", "families"] = "tokens"
    half_life_requests: float = 64.0
    family_window_requests: int = 96

    def __post_init__(self) -> None:
        if self.half_life_requests <= 0:
            raise ParamError("half_life_requests", "must be > 0")
        if self.family_window_requests < 1:
            raise ParamError("family_window_requests", "must be >= 1")


class DecayingLoads:
    """Exponentially decaying per-worker sums, O(1) per update: instead of decaying every
    worker, each new amount is scaled up by a growing factor (rescaled before overflow)."""

    __slots__ = ("_growth", "_loads", "_scale")

    def __init__(self, half_life: float) -> None:
        self._growth = 2.0 ** (1.0 / half_life)
        self._scale = 1.0
        self._loads: dict[str, float] = {}

    def add(self, worker_id: str, amount: float) -> None:
        self._scale *= self._growth
        self._loads[worker_id] = self._loads.get(worker_id, 0.0) + amount * self._scale
        if self._scale > _RESCALE_AT:
            self._loads = {w: v / self._scale for w, v in self._loads.items()}
            self._scale = 1.0

    def load(self, worker_id: str) -> float:
        """The decayed sum, in units of the latest amount's weight."""
        return self._loads.get(worker_id, 0.0) / self._scale


class RecentFamilies:
    """Per worker, the prompt families routed to it within the last ``window`` requests."""

    __slots__ = ("_by_worker", "_count", "window")

    def __init__(self, window: int) -> None:
        self.window = window
        self._count = 0
        self._by_worker: dict[str, OrderedDict[tuple[int, int], int]] = {}

    def add(self, worker_id: str, family: tuple[int, int] | None) -> None:
        self._count += 1
        if family is None:
            return
        seen = self._by_worker.setdefault(worker_id, OrderedDict())
        seen[family] = self._count
        seen.move_to_end(family)

    def active(self, worker_id: str) -> int:
        seen = self._by_worker.get(worker_id)
        if seen is None:
            return 0
        oldest = self._count - self.window
        while seen and next(iter(seen.values())) <= oldest:
            seen.popitem(last=False)
        return len(seen)


class RoutedShareScorer:
    def __init__(self, name: str, params: RoutedShareParams) -> None:
        self.name = name
        self.unit = params.unit
        self.loads = DecayingLoads(params.half_life_requests)
        self.families = RecentFamilies(params.family_window_requests)

    def inherit_state(self, previous: object) -> None:
        """Keep the recent loads across a configuration reload."""
        if isinstance(previous, RoutedShareScorer):
            self.loads = previous.loads
            self.families = previous.families

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        loads = {view.id: self.loads.load(view.id) for view in workers}
        if self.unit == "families":
            total = sum(loads.values())
            loads = {worker: self.families.active(worker) + (load / total if total else 0.0)
                     for worker, load in loads.items()}
        peak = max(loads.values(), default=0.0)
        if peak <= 0.0:
            return dict.fromkeys(loads, 1.0)
        return {worker: 1.0 - load / peak for worker, load in loads.items()}

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        if decision.worker_id is None:
            return
        amount = max(1, request.num_prompt_tokens) if self.unit != "requests" else 1
        self.loads.add(decision.worker_id, float(amount))
        if self.unit == "families":
            self.families.add(decision.worker_id, family_of(request))

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        return None


def family_of(request: RoutingRequest) -> tuple[int, int] | None:
    """(block size, hash of the first full block) at the smallest hashed block size."""
    for block_size in sorted(request.block_hashes):
        chain = request.block_hashes[block_size]
        if chain:
            return block_size, chain[0]
    return None


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", RoutedShareParams,
                      lambda params, ctx: RoutedShareScorer(ctx.name, params),
                      needs=("num_prompt_tokens", "block_hashes"))
