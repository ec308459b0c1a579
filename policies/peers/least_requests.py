"""Least-requests: the worker with the fewest requests the router has in flight.

Source rule (AIBrix ``least-request``, Dynamo ``least-loaded``, SGLang's min-load fallback;
peer-routers.md §2.2.1, §2.4, §2.5): argmin of router-tracked in-flight requests; workers that
tie all score 1.0 and the picker breaks the tie. As a [0, 1] scorer this is
``(max - n) / (max - min)`` over the candidates (all equal: 1.0), so it composes with others::

    scorers: [{type: peer-least-requests, weight: 1}]
    picker: {type: max-score}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.base import CycleState, RoutingRequest
from policies.registry import PluginRegistry
from workers.models import WorkerView

TYPE_NAME = "peer-least-requests"


@dataclass(frozen=True, slots=True)
class LeastRequestsParams:
    """No parameters."""


def min_max_inverse(values: Mapping[str, float]) -> dict[str, float]:
    """``(max - v) / (max - min)`` per key; every key 1.0 when all values are equal."""
    if not values:
        return {}
    high, low = max(values.values()), min(values.values())
    if high == low:
        return dict.fromkeys(values, 1.0)
    return {key: (high - value) / (high - low) for key, value in values.items()}


class LeastRequestsScorer:
    def __init__(self, name: str = TYPE_NAME) -> None:
        self.name = name

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        return min_max_inverse({view.id: float(view.inflight_requests) for view in workers})


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", LeastRequestsParams,
                      lambda params, ctx: LeastRequestsScorer(ctx.name))
