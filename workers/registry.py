"""The live fleet: static worker info, the latest snapshot of each, and in-flight counts.

The scraper writes snapshots here; the router reads ``views(now)`` for every decision. The
in-flight tracker is shared with the router's state store, so each view is the snapshot
corrected by what the router dispatched since it was taken (``workers.views.build_view``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from workers.inflight import WorkerInflight
from workers.models import WorkerInfo, WorkerSnapshot, WorkerView
from workers.views import build_view


class InflightSource(Protocol):
    """What the registry reads in-flight counts from (``workers.inflight.InflightTracker``,
    or a store that merges several router replicas' counts)."""

    def get(self, worker_id: str) -> WorkerInflight: ...

    def on_scrape(self, worker_id: str) -> None: ...


def runners_by_model(infos: Iterable[WorkerInfo]) -> dict[str, frozenset[str]]:
    """What the fleet declares each served model runs as (vLLM's ``--runner``: ``generate``,
    ``pooling``), over the workers serving it."""
    runners: dict[str, frozenset[str]] = {}
    for info in infos:
        for model in info.models:
            runners[model] = runners.get(model, frozenset()) | {info.model_spec.runner}
    return runners


class WorkerRegistry:
    """Current snapshots of a fixed set of workers. Owned by one event loop."""

    __slots__ = ("_by_id", "_default_model", "_infos", "_runners", "_snapshots", "inflight")

    def __init__(self, infos: Sequence[WorkerInfo], inflight: InflightSource) -> None:
        self._infos = tuple(infos)
        self._by_id = {info.id: info for info in self._infos}
        if len(self._by_id) != len(self._infos):
            raise ValueError("worker ids must be unique")
        # model name -> what the fleet file declares it runs as: fixed, so read once
        self._runners = runners_by_model(self._infos)
        models = {model for info in self._infos for model in info.models}
        self._default_model = next(iter(models)) if len(models) == 1 else None
        self._snapshots: dict[str, WorkerSnapshot] = {}
        self.inflight = inflight

    @property
    def infos(self) -> tuple[WorkerInfo, ...]:
        return self._infos

    def default_model(self) -> str | None:
        """The model a request that names none is for, as vLLM serves its own: the one model
        of the fleet file when every worker serves that one alone; else None."""
        return self._default_model

    def info(self, worker_id: str) -> WorkerInfo:
        return self._by_id[worker_id]

    def snapshot(self, worker_id: str) -> WorkerSnapshot | None:
        return self._snapshots.get(worker_id)

    def update(self, snapshot: WorkerSnapshot, fresh: bool) -> None:
        """Store a snapshot; ``fresh`` when it came from a successful scrape just now."""
        if snapshot.worker_id not in self._by_id:
            raise KeyError(snapshot.worker_id)
        self._snapshots[snapshot.worker_id] = snapshot
        if fresh:
            self.inflight.on_scrape(snapshot.worker_id)

    def views(self, now: float) -> list[WorkerView]:
        snapshots = self._snapshots
        inflight = self.inflight
        return [build_view(info, snapshots.get(info.id), inflight.get(info.id), now)
                for info in self._infos]

    def runners_of(self, model: str) -> frozenset[str]:
        """What the fleet file declares the workers serving ``model`` run it as
        (``generate``, ``pooling``); empty when no worker is declared with that name."""
        return self._runners.get(model, frozenset())

    def known_models(self) -> set[str]:
        """Every model name some worker of the fleet serves or has served (incl. adapters)."""
        models: set[str] = set()
        for info in self._infos:
            models.update(info.models)
            snap = self._snapshots.get(info.id)
            if snap is not None:
                models.update(snap.served_models)
                models.update(snap.lora_adapters)
        return models
