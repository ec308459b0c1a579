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
from itertools import repeat
from operator import add, attrgetter, is_, mul
from types import MappingProxyType
from typing import Any

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
                                 _no_candidate_reason(removed), "no-candidate",
                                 tuple(skipped))
        candidates = self._score(request, remaining, cycle, skipped)
        chosen = self._pick(request, candidates, cycle, skipped)
        ranked = tuple(sorted(candidates, key=_total, reverse=True))   # stable: view order on ties
        reason, decided_by = _explain(chosen, ranked, self.scorers, self.picker, cycle)
        return ProfileResult(chosen, ranked, MappingProxyType(removed), reason, decided_by,
                             tuple(skipped))

    def _filter(self, request: RoutingRequest, workers: Sequence[WorkerView], cycle: CycleState,
                removed: dict[str, str], skipped: list[str]) -> list[WorkerView]:
        """Filters return a subset of the views they are given (the same objects)."""
        remaining = list(workers)
        for plugin in self.filters:
            if not remaining:
                break
            try:
                kept = plugin.filter(request, remaining, cycle)
            except Exception:
                log.exception("filter %s failed; skipped", plugin.name)
                skipped.append(plugin.name)
                continue
            if len(kept) == len(remaining):
                continue
            kept_objects = set(map(id, kept))
            survivors: list[WorkerView] = []
            for view in remaining:
                if id(view) in kept_objects:
                    survivors.append(view)
                else:
                    removed[view.info.id] = plugin.name
            remaining = survivors
        return remaining

    def _score(self, request: RoutingRequest, workers: Sequence[WorkerView], cycle: CycleState,
               skipped: list[str]) -> list[CandidateScore]:
        ids = [view.info.id for view in workers]
        names: list[str] = []
        columns: list[list[float]] = []
        totals = [0.0] * len(ids)
        for weighted in self.scorers:
            try:
                raw = weighted.scorer.score(request, workers, cycle)
                column = _clamped(list(map(raw.get, ids, repeat(0.0))))
            except Exception:
                log.exception("scorer %s failed; skipped", weighted.scorer.name)
                skipped.append(weighted.scorer.name)
                continue
            names.append(weighted.scorer.name)
            columns.append(column)
            totals = list(map(add, totals, map(mul, column, repeat(weighted.weight))))
        rows = zip(*columns, strict=True) if columns else repeat(())
        return list(map(_new_candidate, ids, totals, map(dict, map(zip, repeat(names), rows))))

    def _pick(self, request: RoutingRequest, candidates: Sequence[CandidateScore],
              cycle: CycleState, skipped: list[str]) -> CandidateScore:
        try:
            chosen = self.picker.pick(request, candidates, cycle)
            if any(map(is_, candidates, repeat(chosen))):
                return chosen
            log.error("picker %s returned a non-candidate; using the best total",
                      self.picker.name)
        except Exception:
            log.exception("picker %s failed; using the best total", self.picker.name)
        skipped.append(self.picker.name)
        return max(candidates, key=_total)


_total = attrgetter("total")

# CandidateScore is a frozen slots dataclass without __post_init__: filling its slots through
# their descriptors builds the same object as its __init__, about 2.5x faster, which matters
# at a thousand candidates per decision.
_set_worker_id = vars(CandidateScore)["worker_id"].__set__
_set_total = vars(CandidateScore)["total"].__set__
_set_scores = vars(CandidateScore)["scores"].__set__


def _new_candidate(worker_id: str, total: float, scores: Mapping[str, float]) -> CandidateScore:
    candidate: CandidateScore = object.__new__(CandidateScore)
    _set_worker_id(candidate, worker_id)
    _set_total(candidate, total)
    _set_scores(candidate, scores)
    return candidate


def _clamped(column: list[Any]) -> list[float]:
    """The column itself when every value is a number in [0, 1] (checked in C), else a
    clamped copy (NaN and non-numbers count 0)."""
    try:
        total = sum(column)
        if total == total and min(column, default=0.0) >= 0.0 and max(column, default=0.0) <= 1.0:
            return column
    except TypeError:
        pass
    return [_clamp(value) for value in column]


def _clamp(value: object) -> float:
    if not isinstance(value, (int, float)) or math.isnan(value):
        return 0.0
    return min(1.0, max(0.0, float(value)))


def _no_candidate_reason(removed: Mapping[str, str]) -> str:
    if not removed:
        return "no candidate: no workers"
    by_filter: dict[str, int] = {}
    for name in removed.values():
        by_filter[name] = by_filter.get(name, 0) + 1
    parts = ", ".join(f"{n} by {name}" for name, n in by_filter.items())
    return f"no candidate: {len(removed)} worker(s) filtered out ({parts})"


def _explain(chosen: CandidateScore, ranked: Sequence[CandidateScore],
             scorers: Sequence[WeightedScorer], picker: Picker,
             cycle: CycleState) -> tuple[str, str]:
    """The reason text and the deciding term: the scorer that most separated the chosen
    worker from the runner-up, or the picker when scores did not separate them."""
    override: tuple[str, str] | None = cycle.read(REASON)
    if override is not None:
        return override
    if len(ranked) == 1:
        return f"{chosen.worker_id}: only candidate", "only-candidate"
    runner_up = ranked[1] if ranked[0] is chosen else ranked[0]
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
