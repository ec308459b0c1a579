"""One scheduling profile run: filters → Σ weight·score → picker, fault-isolated.

A plugin that raises is logged and skipped: a filter keeps its input, a scorer contributes
nothing, a picker is replaced by the highest total (first in view order on ties). Scores are
clamped to [0, 1] (NaN and missing workers count 0); the total is the weighted sum, not
normalised. The result carries every candidate's per-scorer scores and which filter
removed each worker, plus a short explanation of what decided.

Cost at a thousand workers: the candidates' ids and positions come from a per-profile
``CandidateIndex`` (``policies.candidate_index``), rebuilt only when the fleet changes and
shared with the plugins through the ``CycleState``. A scorer may offer
``score_column(request, workers, cycle) -> list[float]``, its scores in view order (the
built-in scorers do), which saves the id-keyed dict; one that also sets
``clamped_column = True`` returns a fresh list already clamped as ``_clamped`` would leave
it, so the profile takes it as it is. Scores and totals stay in columns
(``policies.candidates``) and candidate objects are built only when read: the picker's
choice at once, the rest for ``/debug/decisions`` or the decision log.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import add, is_, mul
from types import MappingProxyType
from typing import Any

from policies.base import CandidateScore, CycleState, Filter, Picker, RoutingRequest, Scorer
from policies.candidate_index import CandidateIndexCache, share_index
from policies.candidates import CandidateTable, RankedCandidates, new_candidate
from policies.cycle_keys import REASON, RUNNER_UP
from policies.failure_log import PluginFailureLog
from workers.models import WorkerView

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WeightedScorer:
    scorer: Scorer
    weight: float


@dataclass(frozen=True, slots=True)
class ProfileResult:
    chosen: CandidateScore | None
    candidates: Sequence[CandidateScore]    # ranked by total (``RankedCandidates``)
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
    # the last candidate list's ids and positions, reused while the fleet repeats
    indexes: CandidateIndexCache = field(default_factory=CandidateIndexCache, compare=False,
                                         repr=False)
    # filters whose failure removes every worker they were given (``on_failure: refuse``)
    refusing_filters: frozenset[str] = frozenset()
    # a plugin failing on every request: its traceback once a minute, not per request
    failures: PluginFailureLog = field(default_factory=lambda: PluginFailureLog(log),
                                       compare=False, repr=False)

    def run(self, request: RoutingRequest, workers: Sequence[WorkerView],
            cycle: CycleState, filtered_out: dict[str, str] | None = None) -> ProfileResult:
        removed = filtered_out if filtered_out is not None else {}
        skipped: list[str] = []
        remaining = self._filter(request, workers, cycle, removed, skipped)
        if not remaining:
            return ProfileResult(None, (), MappingProxyType(removed),
                                 _no_candidate_reason(removed), "no-candidate",
                                 tuple(skipped))
        table = self._score(request, remaining, cycle, skipped)
        picked = len(skipped)
        position = self._pick(request, table, cycle, skipped)
        chosen = table.at(position)
        if len(skipped) > picked:       # the picker failed: the best total chose
            reason, decided_by = _fallback_reason(position, table, self.picker.name)
        else:
            reason, decided_by = _explain(position, table, self.scorers, self.picker, cycle)
        return _new_result(chosen, RankedCandidates(table), MappingProxyType(removed), reason,
                           decided_by, tuple(skipped))

    def _filter(self, request: RoutingRequest, workers: Sequence[WorkerView], cycle: CycleState,
                removed: dict[str, str], skipped: list[str]) -> tuple[WorkerView, ...]:
        """Filters return a subset of the views they are given (the same objects). Each
        plugin is given a tuple: a list that one filter edited in place (or a scorer sorted)
        removed workers unrecorded, or moved the next scorers' scores onto other workers."""
        remaining = tuple(workers)
        for plugin in self.filters:
            if not remaining:
                break
            try:
                kept = plugin.filter(request, remaining, cycle)
                if not isinstance(kept, (list, tuple)):
                    raise TypeError(f"returned {type(kept).__name__}, not a list of the "
                                    "views it was given")
            except (Exception, SystemExit):
                refusing = plugin.name in self.refusing_filters
                self.failures.failed(plugin.name, "filter %s failed; %s", plugin.name,
                                     "every worker removed (on_failure: refuse)" if refusing
                                     else "skipped")
                skipped.append(plugin.name)
                if refusing:
                    return self._refused_by(plugin.name, remaining, removed)
                continue
            if len(kept) == len(remaining) and all(map(is_, kept, remaining)):
                continue           # kept them all, in order (the common case)
            kept_objects = set(map(id, kept))
            survivors = tuple(view for view in remaining if id(view) in kept_objects)
            if len(survivors) != len(kept_objects):
                refusing = plugin.name in self.refusing_filters
                self.failures.failed(
                    plugin.name, "filter %s returned objects that are not the views it was "
                    "given (it must return a subset of them); %s", plugin.name,
                    "every worker removed (on_failure: refuse)" if refusing else "skipped")
                skipped.append(plugin.name)
                if refusing:
                    return self._refused_by(plugin.name, remaining, removed)
                continue
            for view in remaining:
                if id(view) not in kept_objects:
                    removed[view.info.id] = plugin.name
            remaining = survivors
        return remaining

    @staticmethod
    def _refused_by(name: str, remaining: Sequence[WorkerView],
                    removed: dict[str, str]) -> tuple[WorkerView, ...]:
        """A failed filter of ``on_failure: refuse``: none of ``remaining`` is left."""
        for view in remaining:
            removed[view.info.id] = f"{name} (failed)"
        return ()

    def _score(self, request: RoutingRequest, workers: Sequence[WorkerView], cycle: CycleState,
               skipped: list[str]) -> CandidateTable:
        index = self.indexes.index(workers)
        share_index(cycle, workers, index)
        ids = index.ids
        names: list[str] = []
        columns: list[list[float]] = []
        totals: list[float] | None = None      # None: still all 0.0
        for weighted in self.scorers:
            scorer, weight = weighted.scorer, weighted.weight
            clamped = getattr(scorer, "clamped_column", False) is True
            try:
                column = _score_column(scorer, request, workers, cycle, ids, clamped)
                if not clamped:
                    column = _clamped(column)
            except (Exception, SystemExit):
                self.failures.failed(scorer.name, "scorer %s failed; skipped", scorer.name)
                skipped.append(scorer.name)
                continue
            names.append(scorer.name)
            columns.append(column)
            # x * 1.0 is x for any float: the same totals as the general sum, one pass less
            if weight == 1.0:
                totals = list(map(add, totals if totals is not None else repeat(0.0, len(ids)),
                                  column))
            else:
                totals = list(map(add, totals if totals is not None else repeat(0.0, len(ids)),
                                  map(mul, column, repeat(weight))))
        return CandidateTable(ids, totals if totals is not None else [0.0] * len(ids), names,
                              columns, index.position)

    def _pick(self, request: RoutingRequest, table: CandidateTable, cycle: CycleState,
              skipped: list[str]) -> int:
        """The chosen candidate's position in ``table``."""
        try:
            chosen = self.picker.pick(request, table, cycle)
            position = table.position_of(chosen)
            if position is not None:
                return position
            self.failures.failed(
                self.picker.name, "picker %s returned %s, which is none of the candidates "
                "(it must return one of the objects in the table); using the best total",
                self.picker.name, _short_repr(chosen))
        except (Exception, SystemExit):
            self.failures.failed(self.picker.name, "picker %s failed; using the best total",
                                 self.picker.name)
        skipped.append(self.picker.name)
        return table.totals.index(max(table.totals))


_new_candidate = new_candidate   # its former home; the profile tests build candidates with it

# ProfileResult is a frozen slots dataclass without __post_init__: filled through its slot
# descriptors it is the same object its __init__ builds, in half the time (one per decision).
_result_setters = tuple(vars(ProfileResult)[name].__set__ for name in (
    "chosen", "candidates", "filtered_out", "reason", "decided_by", "skipped"))


def _new_result(chosen: CandidateScore | None, candidates: Sequence[CandidateScore],
                filtered_out: Mapping[str, str], reason: str, decided_by: str,
                skipped: tuple[str, ...]) -> ProfileResult:
    result: ProfileResult = object.__new__(ProfileResult)
    set_chosen, set_candidates, set_removed, set_reason, set_decided, set_skipped = (
        _result_setters)
    set_chosen(result, chosen)
    set_candidates(result, candidates)
    set_removed(result, filtered_out)
    set_reason(result, reason)
    set_decided(result, decided_by)
    set_skipped(result, skipped)
    return result


def _score_column(scorer: Scorer, request: RoutingRequest, workers: Sequence[WorkerView],
                  cycle: CycleState, ids: list[str], clamped: bool) -> list[Any]:
    """One scorer's raw scores in view order: its ``score_column`` when it has one (the
    built-in scorers: no dict), else its ``score`` mapping read by worker id (0 when
    missing). A scorer whose ``clamped_column`` is True (``clamped``) promises a fresh list
    clamped as ``_clamped`` would leave it, so the profile neither copies nor clamps its
    column."""
    score_column = getattr(scorer, "score_column", None)
    if score_column is None:
        return list(map(scorer.score(request, workers, cycle).get, ids, repeat(0.0)))
    column: list[Any] = score_column(request, workers, cycle)
    if not clamped:
        column = list(column)
    if len(column) != len(ids):
        raise ValueError(f"score_column gave {len(column)} scores for {len(ids)} workers")
    return column


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


def _short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:199] + "…"


def _no_candidate_reason(removed: Mapping[str, str]) -> str:
    if not removed:
        return "no candidate: no workers"
    by_filter: dict[str, int] = {}
    for name in removed.values():
        by_filter[name] = by_filter.get(name, 0) + 1
    parts = ", ".join(f"{n} by {name}" for name, n in by_filter.items())
    return f"no candidate: {len(removed)} worker(s) filtered out ({parts})"


def _fallback_reason(chosen: int, table: CandidateTable, picker: str) -> tuple[str, str]:
    """What a decision says when its picker failed and the best total chose instead."""
    return (f"{table.ids[chosen]}: best total {table.totals[chosen]:.2f} "
            f"(picker {picker} failed)", "picker-failed")


def _explain(chosen: int, table: CandidateTable, scorers: Sequence[WeightedScorer],
             picker: Picker, cycle: CycleState) -> tuple[str, str]:
    """The reason text and the deciding term: the scorer that most separated the chosen
    worker (at position ``chosen``) from the runner-up (the one the picker weighed it against,
    ``RUNNER_UP``, else the next one by total, view order on ties), or the picker when scores
    did not separate them."""
    override: tuple[str, str] | None = cycle.read(REASON)
    if override is not None:
        return override
    chosen_id = table.ids[chosen]
    if len(table) == 1:
        return f"{chosen_id}: only candidate", "only-candidate"
    weighed: str | None = cycle.read(RUNNER_UP)
    runner_up = (table.ids.index(weighed) if weighed is not None and weighed in table.ids
                 else table.runner_up(chosen))
    runner_id = table.ids[runner_up]
    chosen_total, runner_total = table.totals[chosen], table.totals[runner_up]
    # a scores dict keeps the last column of a repeated scorer name; so does this index
    column_of = {name: column for name, column in zip(table.names, table.columns, strict=True)}
    best_name, best_gap = "", 0.0
    for weighted in scorers:
        name = weighted.scorer.name
        column = column_of.get(name)
        if column is None:
            continue
        gap = weighted.weight * (column[chosen] - column[runner_up])
        if gap > best_gap:
            best_name, best_gap = name, gap
    if not best_name or chosen_total <= runner_total:
        return (f"{chosen_id} by {picker.name} "
                f"(total {chosen_total:.2f} vs {runner_total:.2f} on {runner_id})",
                picker.name)
    best = column_of[best_name]
    return (f"{best_name} {best[chosen]:.2f} on {chosen_id} vs "
            f"{best[runner_up]:.2f} on {runner_id}; "
            f"total {chosen_total:.2f} vs {runner_total:.2f}", best_name)
