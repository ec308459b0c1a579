"""``kvroute_estimate_*``: how far off the policy's time estimates are, rendered at scrape time.

Each profile's learning estimator (``policies.latency``: the estimated-time / cost plugins'
shared ``TimeEstimator``) judges, on every finished request, its raw model against the online
correction it had learnt when the request was routed (``OnlineCorrection.judgement``); the
estimates apply the correction. This collector reads those running errors from the engine in
force (a hot reload hands the learnt estimator over, so the series go on), per profile and
metric:

* ``kvroute_estimate_error{profile,metric,estimate}``: mean |ln(observed / estimated)| over the
  recent finished requests (plain mean of the first 200, then weighted 1/200), for
  ``estimate="raw"`` and ``"corrected"``; 0.1 is about 10 % off. Shown once a request was
  compared.
* ``kvroute_estimate_compared_requests_total{profile,metric}``: requests compared so far.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from policies.engine import PolicyEngine
from policies.latency.online import Metric as TimeMetric
from policies.latency.online import OnlineCorrection

METRICS: tuple[TimeMetric, ...] = ("ttft", "tpot")


def learning_corrections(engine: PolicyEngine) -> Iterator[tuple[str, OnlineCorrection]]:
    """(profile name, its estimator's correction) for every plugin that learns one: the first
    estimated-time or cost plugin of each profile (plugins outside a profile by their path)."""
    for path, _, plugin in engine.plugins():
        if getattr(plugin, "learns", False) is not True:
            continue
        correction = getattr(getattr(plugin, "estimator", None), "correction", None)
        if isinstance(correction, OnlineCorrection):
            yield _profile_of(path), correction


def _profile_of(path: str) -> str:
    """``profiles.NAME.scorers[1]`` -> ``NAME``; any other path as it is."""
    if path.startswith("profiles."):
        return path.removeprefix("profiles.").split(".", 1)[0]
    return path


class EstimateCollector(Collector):
    """Renders the ``kvroute_estimate_*`` series from the engine ``engine()`` returns."""

    def __init__(self, engine: Callable[[], PolicyEngine]) -> None:
        self._engine = engine

    def collect(self) -> Iterable[Metric]:
        error = GaugeMetricFamily(
            "kvroute_estimate_error", "Mean |ln(observed / estimated)| of TTFT or TPOT over the "
            "recent finished requests, of the raw model and of its online correction (0.1 is "
            "about 10 % off).", labels=["profile", "metric", "estimate"])
        compared = CounterMetricFamily(
            "kvroute_estimate_compared_requests", "Finished requests on which the raw model "
            "and the online correction were compared.", labels=["profile", "metric"])
        for profile, correction in learning_corrections(self._engine()):
            for metric in METRICS:
                raw, corrected, samples = correction.judgement(metric)
                compared.add_metric([profile, metric], float(samples))
                if samples:
                    error.add_metric([profile, metric, "raw"], raw)
                    error.add_metric([profile, metric, "corrected"], corrected)
        return [error, compared]
