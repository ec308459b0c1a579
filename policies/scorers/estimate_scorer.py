"""``EstimateScorer``: the base of the scorers that turn per-worker estimates into scores.

The ``estimated-time`` and ``cost`` scorers share everything but the scoring rule: they take
the shared per-request estimates (``EstimatingPlugin.estimates``), score them with their own
``_scores`` and hand the profile either a mapping (``score``) or a clamped column in view
order with 0 for the workers left without an estimate (``score_column``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.base import CycleState, RoutingRequest
from policies.candidate_index import candidate_index
from policies.latency.estimator import Estimate
from policies.latency.observer import EstimatingPlugin, unit_column
from workers.models import WorkerView


class EstimateScorer(EstimatingPlugin):
    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        estimates = self.estimates(request, workers, cycle)
        return dict(zip(estimates, self._scores(estimates, cycle), strict=True))

    def score_column(self, request: RoutingRequest, workers: Sequence[WorkerView],
                     cycle: CycleState) -> list[float]:
        """``score`` in view order, clamped as the profile clamps (0 for workers without an
        estimate)."""
        estimates = self.estimates(request, workers, cycle)
        return unit_column(candidate_index(cycle, workers), estimates,
                           self._scores(estimates, cycle))

    def _scores(self, estimates: Mapping[str, Estimate], cycle: CycleState) -> list[float]:
        """Scores in the order of ``estimates`` (each subclass's rule)."""
        raise NotImplementedError
