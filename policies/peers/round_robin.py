"""Round-robin as production-stack implements it (``roundrobin`` routing logic).

Source rule (``src/vllm_router/routers/routing_logic.py``; peer-routers.md §2.1): sort the
endpoint URLs, keep a counter, send to ``sorted[idx % n]`` and advance. The counter is one per
endpoint set, so a worker joining or leaving restarts the cycle. No load signal is read.

One-hot scorer (1.0 for the turn's worker), used with ``max-score``::

    scorers: [{type: peer-round-robin, weight: 1}]
    picker: {type: max-score}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.base import CycleState, RoutingRequest
from policies.registry import PluginRegistry
from workers.models import WorkerView

TYPE_NAME = "peer-round-robin"


@dataclass(frozen=True, slots=True)
class RoundRobinParams:
    """No parameters."""


class RoundRobinScorer:
    def __init__(self, name: str = TYPE_NAME) -> None:
        self.name = name
        self._counters: dict[tuple[str, ...], int] = {}

    def choose(self, workers: Sequence[WorkerView]) -> str | None:
        if not workers:
            return None
        ordered = sorted(workers, key=lambda view: view.info.url)
        endpoint_set = tuple(view.info.url for view in ordered)
        index = self._counters.get(endpoint_set, 0)
        self._counters[endpoint_set] = index + 1
        return ordered[index % len(ordered)].id

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        choice = self.choose(workers)
        return {view.id: 1.0 if view.id == choice else 0.0 for view in workers}


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", RoundRobinParams,
                      lambda params, ctx: RoundRobinScorer(ctx.name))
