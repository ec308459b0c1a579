"""Counters and histograms updated on the event loop without locks, exposed as Prometheus.

``prometheus_client`` metrics take a lock and several Python calls per update (an
``observe`` costs microseconds), and the request path updates about a dozen series per
request. These classes keep plain per-series numbers that the loop thread updates with one
addition (a histogram: a bisection and two additions) and render them at scrape time
through a ``Collector`` as the same samples a ``prometheus_client`` metric of that name,
labels and buckets would give (``_total``; ``_bucket``/``_count``/``_sum``), less the
``_created`` samples the router's ``/metrics`` leaves out (``router.exposition``).
Only for metrics updated from one thread (the router's event loop).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

from prometheus_client.core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class CounterCell:
    """One labelled series of a ``LoopCounter``."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class HistogramCell:
    """One labelled series of a ``LoopHistogram``: per-bucket counts (not cumulative)."""

    __slots__ = ("_bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0.0

    def observe(self, amount: float) -> None:
        self.total += amount
        if amount == amount:     # NaN falls in no bucket, as in prometheus_client
            self.counts[bisect_left(self._bounds, amount)] += 1


Cell = TypeVar("Cell", CounterCell, HistogramCell)


class _LoopMetric(Generic[Cell]):
    """A metric's labelled series (cells), by their label values; the unlabelled metric has
    one, made at once."""

    __slots__ = ("_cells", "documentation", "labelnames", "name")

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._cells: dict[tuple[str, ...], Cell] = {}

    def _new_cell(self) -> Cell:
        raise NotImplementedError

    def labels(self, *values: str) -> Cell:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
        key = tuple(map(str, values))
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = self._new_cell()
        return cell

    def remove_where(self, label: str, value: str) -> None:
        """Drop every series whose ``label`` is ``value`` (a worker that left the fleet)."""
        position = self.labelnames.index(label)
        for key in [key for key in self._cells if key[position] == value]:
            del self._cells[key]

    def label_values(self, label: str) -> set[str]:
        """The values ``label`` takes in the series kept."""
        position = self.labelnames.index(label)
        return {key[position] for key in self._cells}


class LoopCounter(_LoopMetric[CounterCell]):
    __slots__ = ()

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, documentation, labelnames)
        if not self.labelnames:
            self._cells[()] = CounterCell()

    def _new_cell(self) -> CounterCell:
        return CounterCell()

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, cell in self._cells.items():
            family.add_metric(key, cell.value)
        return [family]


class LoopHistogram(_LoopMetric[HistogramCell]):
    __slots__ = ("_bounds",)

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 buckets: Sequence[float] = ()) -> None:
        super().__init__(name, documentation, labelnames)
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._bounds = tuple(bounds)
        if not self.labelnames:
            self._cells[()] = HistogramCell(self._bounds)

    def _new_cell(self) -> HistogramCell:
        return HistogramCell(self._bounds)

    def observe(self, amount: float) -> None:
        """The unlabelled series."""
        self._cells[()].observe(amount)

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        names: list[str] = [floatToGoString(bound) for bound in self._bounds]  # type: ignore[no-untyped-call]
        for key, cell in self._cells.items():
            cumulative, buckets = 0, []
            for name, count in zip(names, cell.counts, strict=True):
                cumulative += count
                buckets.append((name, float(cumulative)))
            family.add_metric(key, buckets, cell.total)
        return [family]


class LoopMetricsCollector(Collector):
    """Renders a set of loop metrics in the order given."""

    def __init__(self, metrics: Sequence[LoopCounter | LoopHistogram]) -> None:
        self._metrics = tuple(metrics)

    def collect(self) -> Iterable[Metric]:
        for metric in self._metrics:
            yield from metric.collect()
