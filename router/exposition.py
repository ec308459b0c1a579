"""The router's ``/metrics`` body: its registry in Prometheus' text format (0.0.4), without
the ``_created`` series, written by a lean encoder.

``prometheus_client`` gives every counter, histogram and summary series a ``_created``
sample (the time it was first labelled), which the text format carries as one more gauge
series each: with ten workers and a hundred tenants 44 % of the samples. No dashboard, rule
or alert of kvroute reads them (``rate`` and ``increase`` see a counter's reset without
them), so they are left out. The render runs on the event loop, where no request moves
meanwhile; ``generate_latest`` spends most of it validating and escaping each sample's
label names one by one (and, for its 0.0.4 format, drops exemplars, as here).
``render_without_created`` writes the same bytes (a test compares
them family by family) with each name checked once per family, and hands any family it does
not cover (a name outside the legacy character set, a sample with a timestamp, a type other
than counter, gauge, histogram, summary or untyped) to ``generate_latest``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import cast

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

CREATED_SUFFIX = "_created"
_go_float = cast(Callable[[float], str], floatToGoString)    # how Go writes a float
_LEGACY_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LEGACY_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# the text format's type of each OpenMetrics type this encoder writes; the rest fall back
_TYPES = {"counter": "counter", "gauge": "gauge", "histogram": "histogram",
          "summary": "summary", "unknown": "untyped"}


class WithoutCreated:
    """A registry's metrics as ``collect`` gives them, less their ``_created`` samples."""

    __slots__ = ("_registry",)

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            # the family's own _created samples alone (as generate_latest tells them apart):
            # a gauge or a histogram named ``..._created`` keeps its samples
            created = metric.name + CREATED_SUFFIX
            kept = [s for s in metric.samples if s.name != created]
            if not kept and metric.samples:      # a family of _created samples alone
                continue
            if len(kept) != len(metric.samples):
                trimmed = Metric(metric.name, metric.documentation, metric.type, metric.unit)
                trimmed.samples = kept
                metric = trimmed
            yield metric


class _Single:
    """One family, as a collector (what ``generate_latest`` takes)."""

    __slots__ = ("_metric",)

    def __init__(self, metric: Metric) -> None:
        self._metric = metric

    def collect(self) -> Iterable[Metric]:
        return (self._metric,)


def _label_value(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def family_text(metric: Metric) -> str | None:
    """The family in the text format, as ``generate_latest`` writes it; None for a family
    this encoder does not cover."""
    kind = _TYPES.get(metric.type)
    if kind is None or not _LEGACY_NAME.match(metric.name):
        return None
    name = metric.name + "_total" if metric.type == "counter" else metric.name
    documentation = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
    lines = [f"# HELP {name} {documentation}\n# TYPE {name} {kind}\n"]
    # names found legal in this family: sample names and label names apart (a metric name
    # may hold a colon, a label name may not)
    checked: set[str] = set()
    checked_labels: set[str] = set()
    for sample in metric.samples:
        if sample.timestamp is not None:     # (exemplars: not in this format)
            return None
        sample_name = sample.name
        if sample_name not in checked:
            if not _LEGACY_NAME.match(sample_name):
                return None
            checked.add(sample_name)
        labels = sample.labels
        if labels:
            pairs = []
            for key, value in sorted(labels.items()):
                if key not in checked_labels:
                    if not _LEGACY_LABEL.match(key):
                        return None
                    checked_labels.add(key)
                pairs.append(f'{key}="{_label_value(value)}"')
            lines.append(f"{sample_name}{{{','.join(pairs)}}} {_go_float(sample.value)}\n")
        else:
            lines.append(f"{sample_name} {_go_float(sample.value)}\n")
    return "".join(lines)


def render_without_created(registry: CollectorRegistry) -> bytes:
    """``generate_latest(registry)`` less the ``_created`` samples."""
    parts: list[str] = []
    for metric in WithoutCreated(registry).collect():
        text = family_text(metric)
        if text is None:
            text = generate_latest(_Single(metric)).decode()
        parts.append(text)
    return "".join(parts).encode()
