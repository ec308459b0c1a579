"""router/loop_metrics.py: the same samples as prometheus_client metrics of that shape."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from router.loop_metrics import LoopCounter, LoopHistogram, LoopMetricsCollector

BUCKETS = (0.1, 0.5, 1.0)


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() for s in family.samples
            if not s.name.endswith("_created")}


def test_counter_and_histogram_match_prometheus_client() -> None:
    reference, loop = CollectorRegistry(), CollectorRegistry()
    counter = Counter("c", "doc", ["a"], registry=reference)
    histogram = Histogram("h_seconds", "doc", ["a"], buckets=BUCKETS, registry=reference)
    Histogram("bare_seconds", "doc", buckets=BUCKETS, registry=reference)
    loop_counter = LoopCounter("c", "doc", ["a"])
    loop_histogram = LoopHistogram("h_seconds", "doc", ["a"], buckets=BUCKETS)
    loop_bare = LoopHistogram("bare_seconds", "doc", buckets=BUCKETS)
    loop.register(LoopMetricsCollector([loop_counter, loop_histogram, loop_bare]))
    for value in (0.0, 0.1, 0.3, 0.5, 0.7, 1.0, 2.0, math.inf, math.nan):
        histogram.labels("x").observe(value)
        loop_histogram.labels("x").observe(value)
    counter.labels("x").inc(2.5)
    loop_counter.labels("x").inc(2.5)
    counter.labels("y").inc()
    loop_counter.labels("y").inc()
    ours, theirs = _samples(loop), _samples(reference)
    assert ours.keys() == theirs.keys()
    for key, value in theirs.items():
        assert ours[key] == value or (math.isnan(value) and math.isnan(ours[key])), key
    assert loop.get_sample_value("bare_seconds_count") == 0.0
    assert loop.get_sample_value("h_seconds_bucket", {"a": "x", "le": "0.5"}) == 4.0


def test_counters_refuse_negative_amounts_and_wrong_labels() -> None:
    counter = LoopCounter("c", "doc", ["a"])
    with pytest.raises(ValueError):
        counter.labels("x").inc(-1)
    with pytest.raises(ValueError):
        counter.labels("x", "y")
