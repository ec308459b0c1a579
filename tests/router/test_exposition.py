"""router/exposition.py: generate_latest's bytes, less the _created series."""

from __future__ import annotations

import math

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    Summary,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from router.exposition import WithoutCreated, family_text, render_without_created
from router.metrics import RouterMetrics

AWKWARD = ('plain', 'with "quotes"', "back\\slash", "new\nline", "ünïcode", "")


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    counter = Counter("requests", "Requests.\nTwo lines, a \\ too.", ["model", "status"],
                      registry=registry)
    gauge = Gauge("level", "A gauge.", ["tenant"], registry=registry)
    histogram = Histogram("wait_seconds", "A histogram.", ["worker"], registry=registry,
                          buckets=(0.1, 1.0))
    summary = Summary("size_bytes", "A summary.", registry=registry)
    Gauge("bare", "Unlabelled.", registry=registry).set(math.nan)
    for i, value in enumerate(AWKWARD):
        counter.labels(value, str(200 + i)).inc(i + 0.5)
        gauge.labels(value).set((-math.inf, math.inf, 1e-9, 3.0, -0.0, 12345678901.0)[i])
        histogram.labels(value).observe(0.01 * i)
    summary.observe(17)
    Info("build", "Build facts.", registry=registry).info({"version": "1.2"})
    return registry


def test_the_same_bytes_as_prometheus_client_less_created() -> None:
    registry = _registry()
    expected = generate_latest(WithoutCreated(registry))
    body = render_without_created(registry)
    assert body == expected
    assert b"_created" not in body
    assert b'requests_total{model="with \\"quotes\\"",status="201"} 1.5' in body
    assert b'level{tenant="new\\nline"} 3.0' in body and b"bare NaN" in body


def test_the_routers_own_registry_renders_as_prometheus_client_would() -> None:
    metrics = RouterMetrics()
    metrics.record_request('odd "model"', "w0", "H100", "default", 200, "chat")
    metrics.record_request("m", "", "", "none", 429, "completions")
    body = metrics.render()
    # (the process's CPU time, memory and collections move between two renders: compared
    # without them)
    assert _steady(body) == _steady(generate_latest(WithoutCreated(metrics.registry)))
    assert b"_created" not in body and b"kvroute_requests_total{" in body


def _steady(body: bytes) -> list[bytes]:
    return [line for line in body.splitlines()
            if b"process_" not in line and b"python_gc_" not in line]


class _Families:
    def __init__(self, *families: Metric) -> None:
        self._families = families

    def collect(self) -> tuple[Metric, ...]:
        return self._families


def test_families_it_does_not_cover_go_to_prometheus_client() -> None:
    timed = GaugeMetricFamily("timed", "With a timestamp.", labels=["a"])
    timed.add_metric(["x"], 1.0, timestamp=1700000000.5)
    dotted = GaugeMetricFamily("dotted.name", "Not a legacy name.")
    dotted.add_metric([], 2.0)
    odd_label = GaugeMetricFamily("odd_label", "A label name with a dot.", labels=["a.b"])
    odd_label.add_metric(["v"], 3.0)
    for family in (timed, dotted, odd_label):
        assert family_text(family) is None
    registry = CollectorRegistry()
    registry.register(_Families(timed, dotted, odd_label))
    assert render_without_created(registry) == generate_latest(registry)


def _less_own_created(registry: CollectorRegistry) -> bytes:
    """generate_latest's bytes less each family's own ``<name>_created`` samples, the ones
    generate_latest itself tells apart (not any sample whose name ends so)."""
    trimmed = []
    for metric in registry.collect():
        family = Metric(metric.name, metric.documentation, metric.type, metric.unit)
        family.samples = [s for s in metric.samples if s.name != metric.name + "_created"]
        trimmed.append(family)
    return generate_latest(_Families(*trimmed))


def test_a_family_named_created_keeps_its_samples() -> None:
    """A gauge named ``..._created`` (its samples end so too) vanished from /metrics whole."""
    registry = CollectorRegistry()
    Gauge("sessions_created", "Sessions made so far.", registry=registry).set(7)
    Gauge("jobs_created", "Jobs.", ["pool"], registry=registry).labels("a").set(2)
    Counter("items_created", "Items.", registry=registry).inc(3)
    body = render_without_created(registry)
    assert body == _less_own_created(registry)
    assert b"sessions_created 7.0" in body and b'jobs_created{pool="a"} 2.0' in body
    assert b"items_created_created" not in body


def test_a_label_named_as_a_sample_with_a_colon_is_still_checked() -> None:
    """Sample and label names shared one set of names found legal: a label ``a:b`` beside a
    sample ``a:b`` was written as it is, which no Prometheus parses."""
    family = Metric("a:b", "Colon.", "gauge")
    family.add_sample("a:b", {"a:b": "v"}, 1.0)
    registry = CollectorRegistry()
    registry.register(_Families(family))
    assert render_without_created(registry) == generate_latest(registry)
