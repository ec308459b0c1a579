"""``kvroute_state_store_*``: the state store's health, rendered at scrape time.

Replicas share in-flight counts, tenant budgets and Responses API owners through Redis
(``router.state.redis_store``). When Redis is away each replica routes on its own counts and
admits each tenant its whole budget, so an SRE needs to see it:

* ``kvroute_state_store_degraded``: 1 while the shared store is unreachable or refuses
  commands and only local state is used (always 0 without Redis).
* ``kvroute_state_store_replicas``: replicas whose counts this one reads, itself included
  (1 alone, and while degraded). Replicas that disagree are not all on the same Redis
  database (a typo in ``--redis-url``'s ``/N``).
* ``kvroute_state_store_errors_total``: Redis commands that failed.
* ``kvroute_state_store_unsaved_owners``: Responses API owners recorded by this replica
  and not yet written to Redis (written when it answers again).
* ``kvroute_state_store_sync_seconds``: how long the last exchange of counts took: a slow
  Redis delays what each replica knows of the others (and a follow-up's owner lookup)
  without any command failing.
* ``kvroute_state_store_routed_total{direction}``: routed prompts' block hashes this replica
  published (``published``) and learnt from the others (``learnt``) for the ``prefix``
  scorer's routing history.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from router.state.store import StateStore


class StateStoreCollector(Collector):
    """Reads the store's properties at each scrape."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def collect(self) -> Iterable[Metric]:
        store = self._store
        routed = CounterMetricFamily(
            "kvroute_state_store_routed", "Routed prompts' block hashes shared with the other "
            "replicas: published by this one, learnt from the others.", labels=["direction"])
        published, learnt = store.routed_shared
        routed.add_metric(["published"], float(published))
        routed.add_metric(["learnt"], float(learnt))
        return [
            GaugeMetricFamily("kvroute_state_store_degraded",
                              "1 while the shared state store (Redis) is unreachable or "
                              "refuses commands: routing on this replica's state alone.",
                              value=1.0 if store.degraded else 0.0),
            GaugeMetricFamily("kvroute_state_store_replicas",
                              "Replicas sharing state through the store, this one included.",
                              value=float(store.replicas)),
            CounterMetricFamily("kvroute_state_store_errors",
                                "Commands to the shared state store that failed.",
                                value=float(store.errors)),
            GaugeMetricFamily("kvroute_state_store_unsaved_owners",
                              "Responses API owners not yet written to the shared store.",
                              value=float(store.unsaved_owners)),
            GaugeMetricFamily("kvroute_state_store_sync_seconds",
                              "How long this replica's last exchange of counts with the "
                              "shared store took (publish and read, round trips included).",
                              value=store.sync_seconds),
            routed,
        ]
