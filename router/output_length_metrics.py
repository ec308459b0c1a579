"""``kvroute_output_length_*``: how near the previous turn's answer comes, rendered at scrape time.

The ``output-length`` producer predicts a conversation's next turn from its previous turn's
answer length once that has proved the nearer (``policies.producers.output_length``): each
finished continuation scores both that and the other prediction (the typical share or
output of such requests, else ``max_tokens``). This collector reads those running errors from
the engine in force (a hot reload hands them over, so the series go on), per model:

* ``kvroute_output_length_error{model,prediction}``: mean |ln(generated / predicted)| over
  the recent finished continuations (plain mean of the first ``window``, then weighted
  1/``window``), for ``prediction="previous_turn"`` and ``"typical"``; 0.69 is 2 × off.
  Shown once a continuation was judged.
* ``kvroute_output_length_judged_requests_total{model}``: continuations judged so far.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from policies.engine import PolicyEngine
from policies.producers.output_length import OutputLengthProducer


class OutputLengthCollector(Collector):
    """Renders the ``kvroute_output_length_*`` series from the engine ``engine()`` returns."""

    def __init__(self, engine: Callable[[], PolicyEngine]) -> None:
        self._engine = engine

    def collect(self) -> Iterable[Metric]:
        error = GaugeMetricFamily(
            "kvroute_output_length_error", "Mean |ln(generated / predicted)| over the recent "
            "finished continuations of a conversation, of their previous turn's answer length "
            "and of the typical prediction (0.69 is 2 x off).", labels=["model", "prediction"])
        judged = CounterMetricFamily(
            "kvroute_output_length_judged_requests", "Finished continuations on which the "
            "previous turn's answer length and the typical prediction were compared.",
            labels=["model"])
        for producer in self._engine().producers:
            if not isinstance(producer, OutputLengthProducer):
                continue
            for model, turn, typical, count in producer.turn_judgements():
                judged.add_metric([model], float(count))
                error.add_metric([model, "previous_turn"], turn)
                error.add_metric([model, "typical"], typical)
        return [error, judged]
