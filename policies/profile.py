"""One scheduling profile run: filters → Σ weight·score → picker, fault-isolated.

A plugin that raises is logged and skipped: a filter keeps its input, a scorer contributes
nothing, a picker is replaced by the highest total (first in view order on ties). Scores are
clamped to [0, 1] (NaN and missing workers count 0); the total is the weighted sum, not
normalised. The result carries every candidate's per-scorer scores and which filter
removed each worker, plus a short explanation of what decided.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from policies.base import CandidateScore, CycleState, Filter, Picker, RoutingRequest, Scorer
from policies.cycle_keys import REASON
from workers.models import WorkerView

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WeightedScorer:
    scorer: Scorer
    weight: float


@dataclass(frozen=True, slots=True)
class ProfileResult:
    chosen: CandidateScore | None
    candidates: tuple[CandidateScore, ...]
    filtered_out: Mapping[str, str]
    reason: str
    decided_by: str
    skipped: tuple[str, ...] = field(default=())   # plugins that raised


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    filters: tuple[Filter, ...]
    scorers: tuple[WeightedScorer, ...]
    picker: Picker

    def run(self, request: RoutingRequest, workers: Sequence[WorkerView],
            cycle: CycleState, filtered_out: dict[str, str] | None = None) -> ProfileResult:
        removed = filtered_out if filtered_out is not None else {}
        skipped: list[str] = []
        remaining = self._filter(request, workers, cycle, removed, skipped)
        if not remaining:
            return ProfileResult(None, (), MappingProxyType(removed),
                                 _no_candidate_reason(workers, removed), "no-candidate",
                                 tuple(skipped))
        candidates = self._score(request, remaining, cycle, skipped)
        chosen = self._pick(request, candidates, cycle, skipped)
        reason, decided_by = _explain(chosen, candidates, self.scorers, self.picker, cycle)
        ranked = tuple(sorted(candidates, key=lambda c: -c.total))
        return ProfileResult(chosen, ranked, MappingProxyType(removed), reason, decided_by,
                             tuple(skipped))

    def _filter(self, request: RoutingRequest, workers: Sequence[WorkerView], cycle: CycleState,
                removed: dict[str, str], skipped: list[str]) -> list[WorkerView]:
        remaining = list(workers)
        for plugin in self.filters:
            if not remaining:
                break
            try:
                kept_ids = {view.id for view in plugin.filter(request, remaining, cycle)}
            except Exception:
                log.exception("filter %s failed; skipped", plugin.name)
                skipped.append(plugin.name)
                continue
            for view in remaining:
                if view.id not in kept_ids:
                    removed[view.id] = plugin.name
            remaining = [view for view in remaining if view.id in kept_ids]
        return remaining

    def _score(self, request: RoutingRequest, workers: Sequence[WorkerView], cycle: CycleState,
               skipped: list[str]) -> list[CandidateScore]:
        per_worker: dict[str, dict[str, float]] = {view.id: {} for view in workers}
        totals = dict.fromkeys(per_worker, 0.0)
        for weighted in self.scorers:
            name = weighted.scorer.name
            try:
                raw = weighted.scorer.score(request, workers, cycle)
            except Exception:
                log.exception("scorer %s failed; skipped", name)
                skipped.append(name)
                continue
            for worker_id, scores in per_worker.items():
                value = _clamp(raw.get(worker_id, 0.0))
                scores[name] = value
                totals[worker_id] += weighted.weight * value
        return [CandidateScore(wid, totals[wid], MappingProxyType(scores))
                for wid, scores in per_worker.items()]

    def _pick(self, request: RoutingRequest, candidates: Sequence[CandidateScore],
              cycle: CycleState, skipped: list[str]) -> CandidateScore:
        try:
            chosen = self.picker.pick(request, candidates, cycle)
            if chosen in candidates:
                return chosen
            log.error("picker %s returned a non-candidate; using the best total",
                      self.picker.name)
        except Exception:
            log.exception("picker %s failed; using the best total", self.picker.name)
        skipped.append(self.picker.name)
        return max(candidates, key=lambda c: c.total)


def _clamp(value: object) -> float:
    if not isinstance(value, (int, float)) or math.isnan(value):
        return 0.0
    return min(1.0, max(0.0, float(value)))


def _no_candidate_reason(workers: Sequence[WorkerView], removed: Mapping[str, str]) -> str:
    if not workers:
        return "no candidate: no workers"
    by_filter: dict[str, int] = {}
    for view in workers:
        name = removed.get(view.id, "?")
        by_filter[name] = by_filter.get(name, 0) + 1
    parts = ", ".join(f"{n} by {name}" for name, n in by_filter.items())
    return f"no candidate: {len(workers)} worker(s) filtered out ({parts})"


def _explain(chosen: CandidateScore, candidates: Sequence[CandidateScore],
             scorers: Sequence[WeightedScorer], picker: Picker,
             cycle: CycleState) -> tuple[str, str]:
    """The reason text and the deciding term: the scorer that most separated the chosen
    worker from the runner-up, or the picker when scores did not separate them."""
    override: tuple[str, str] | None = cycle.read(REASON)
    if override is not None:
        return override
    if len(candidates) == 1:
        return f"{chosen.worker_id}: only candidate", "only-candidate"
    others = [c for c in candidates if c is not chosen]
    runner_up = max(others, key=lambda c: c.total)
    best_name, best_gap = "", 0.0
    for weighted in scorers:
        name = weighted.scorer.name
        gap = weighted.weight * (chosen.scores.get(name, 0.0) - runner_up.scores.get(name, 0.0))
        if gap > best_gap:
            best_name, best_gap = name, gap
    if not best_name or chosen.total <= runner_up.total:
        return (f"{chosen.worker_id} by {picker.name} "
                f"(total {chosen.total:.2f} vs {runner_up.total:.2f} on {runner_up.worker_id})",
                picker.name)
    return (f"{best_name} {chosen.scores[best_name]:.2f} on {chosen.worker_id} vs "
            f"{runner_up.scores.get(best_name, 0.0):.2f} on {runner_up.worker_id}; "
            f"total {chosen.total:.2f} vs {runner_up.total:.2f}", best_name)
