"""``ColumnScorer``: scorers that compute their scores as one list in view order.

The profile reads ``score_column`` directly (no per-worker dict on the hot path); the
``Scorer`` protocol's ``score`` mapping is derived from it here, once for every such scorer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

from policies.base import CycleState, RoutingRequest
from workers.models import WorkerView

_id = attrgetter("info.id")


class ColumnScorer:
    name: str

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        return dict(zip(map(_id, workers), self.score_column(request, workers, cycle),
                        strict=True))

    def score_column(self, request: RoutingRequest, workers: Sequence[WorkerView],
                     cycle: CycleState) -> list[float]:
        """Scores in [0, 1], one per view, in view order."""
        raise NotImplementedError
