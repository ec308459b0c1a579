"""Counter totals read from a Prometheus ``/metrics`` page, for the benchmarks' before/after
deltas: the workers' ``vllm:*`` prefix-cache counters, a kvroute router's own prefix
counters (``kvroute_prefix_known_*`` by deciding term, and the ceiling's query tokens) and
its garbage-collection pauses (``kvroute_gc_pause_seconds`` by generation)."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

KNOWN_CHOSEN = "kvroute_prefix_known_chosen_tokens"
KNOWN_BEST = "kvroute_prefix_known_best_tokens"
QUERIED = "kvroute_prefix_ceiling_query_tokens"
ROUTER_PREFIX_COUNTERS = (KNOWN_CHOSEN, KNOWN_BEST, QUERIED)
GC_PAUSES = "kvroute_gc_pause_seconds"
LONG_PAUSE_S = 0.01          # a bucket bound of GC_PAUSES: pauses above it are counted apart


def _families(url: str, headers: Mapping[str, str] | None,
              timeout_s: float) -> list[Metric] | None:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return list(text_string_to_metric_families(response.read().decode()))
    except OSError:
        return None


def scrape_totals(url: str, names: Sequence[str], headers: Mapping[str, str] | None = None,
                  timeout_s: float = 5.0) -> dict[str, float] | None:
    """Each named counter family's summed ``_total`` samples at ``url`` (``…/metrics``); a
    family the page lacks is absent from the result. None when the page cannot be read."""
    families = _families(url, headers, timeout_s)
    if families is None:
        return None
    return {f.name: sum(s.value for s in f.samples if s.name.endswith("_total"))
            for f in families if f.name in names}


@dataclass(frozen=True, slots=True)
class RouterPrefixCounters:
    """A kvroute router's known-prefix counters at one moment (tokens, by deciding term)."""

    chosen: Mapping[str, float] = field(default_factory=dict)
    best: Mapping[str, float] = field(default_factory=dict)
    queried: float = 0.0


def scrape_router_prefix(url: str, headers: Mapping[str, str] | None = None,
                         timeout_s: float = 5.0) -> RouterPrefixCounters | None:
    """The known-prefix counters on a router's ``/metrics``; None when the page cannot be
    read or is not a kvroute router's."""
    families = _families(url, headers, timeout_s)
    if families is None:
        return None
    by_name = {f.name: f for f in families}
    if not all(name in by_name for name in ROUTER_PREFIX_COUNTERS):
        return None

    def by_term(name: str) -> dict[str, float]:
        terms: dict[str, float] = {}
        for s in by_name[name].samples:
            if s.name.endswith("_total"):
                term = s.labels.get("reason", "")
                terms[term] = terms.get(term, 0.0) + s.value
        return terms

    return RouterPrefixCounters(by_term(KNOWN_CHOSEN), by_term(KNOWN_BEST),
                                sum(by_term(QUERIED).values()))


@dataclass(frozen=True, slots=True)
class KnownPrefix:
    """Over a run, as shares of the prompt tokens the router looked up: the cached prefix it
    believed its chosen workers held, what the best-placed candidates held, and the gap
    between them per deciding term (largest first)."""

    chosen: float
    best: float
    passed_over_by_term: dict[str, float]


def known_prefix(before: RouterPrefixCounters | None,
                 after: RouterPrefixCounters | None) -> KnownPrefix | None:
    """The run between two scrapes; None for a router without these counters or without a
    prefix plugin (no prompt tokens looked up)."""
    if before is None or after is None or after.queried - before.queried <= 0:
        return None
    queried = after.queried - before.queried

    def delta(now: Mapping[str, float], then: Mapping[str, float]) -> dict[str, float]:
        return {term: value - then.get(term, 0.0) for term, value in now.items()}

    chosen, best = delta(after.chosen, before.chosen), delta(after.best, before.best)
    gaps = {term: (value - chosen.get(term, 0.0)) / queried for term, value in best.items()}
    return KnownPrefix(
        chosen=round(sum(chosen.values()) / queried, 4),
        best=round(sum(best.values()) / queried, 4),
        passed_over_by_term={term: round(gap, 4) for term, gap in
                             sorted(gaps.items(), key=lambda kv: -kv[1]) if gap > 0})


@dataclass(frozen=True, slots=True)
class GcPauseTotals:
    """A kvroute router's garbage collections so far, in one generation."""

    collections: float = 0.0
    seconds: float = 0.0
    over_10ms: float = 0.0       # collections that took longer than ``LONG_PAUSE_S``


def scrape_router_gc(url: str, headers: Mapping[str, str] | None = None,
                     timeout_s: float = 5.0) -> dict[str, GcPauseTotals] | None:
    """``kvroute_gc_pause_seconds`` on a router's ``/metrics``, by generation; None when the
    page cannot be read or has no such histogram."""
    families = _families(url, headers, timeout_s)
    if families is None:
        return None
    family = next((f for f in families if f.name == GC_PAUSES), None)
    if family is None:
        return None
    count: dict[str, float] = {}
    total: dict[str, float] = {}
    within: dict[str, float] = {}
    for sample in family.samples:
        generation = sample.labels.get("generation", "")
        if sample.name.endswith("_count"):
            count[generation] = sample.value
        elif sample.name.endswith("_sum"):
            total[generation] = sample.value
        elif (sample.name.endswith("_bucket")
              and float(sample.labels.get("le", "nan")) == LONG_PAUSE_S):
            within[generation] = sample.value
    return {g: GcPauseTotals(count[g], total.get(g, 0.0), count[g] - within.get(g, count[g]))
            for g in sorted(count)}


def gc_pauses_between(before: Mapping[str, GcPauseTotals] | None,
                      after: Mapping[str, GcPauseTotals] | None) -> dict[str, GcPauseTotals]:
    """The collections of each generation between two scrapes (empty when either is None)."""
    if before is None or after is None:
        return {}
    empty = GcPauseTotals()
    return {g: GcPauseTotals(a.collections - before.get(g, empty).collections,
                             a.seconds - before.get(g, empty).seconds,
                             a.over_10ms - before.get(g, empty).over_10ms)
            for g, a in after.items()}
