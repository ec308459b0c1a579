"""The live fleet: static worker info, the latest snapshot of each, and in-flight counts.

The scraper writes snapshots here; the router reads ``views(now)`` for every decision. A
reloaded fleet file replaces the set of workers (``replace``, which says what changed). The
in-flight tracker is shared with the router's state store, so each view is the snapshot
corrected by what the router dispatched since it was taken (``workers.views.build_view``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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


# removed workers whose declarations ``info`` still answers for (the last removed)
MAX_RETIRED = 1024


@dataclass(frozen=True, slots=True)
class FleetChange:
    """What a new fleet file changes, each sorted: worker ids added, removed, declared as
    another server (``changed``: another URL, GPU, model, parallelism or batch limits) and
    declared anew for the same server (``relabelled``: labels, price, key, CA bundle,
    KV-event stream)."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    relabelled: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed or self.relabelled)

    @property
    def gone(self) -> tuple[str, ...]:
        """The ids whose former declaration is gone (removed or changed): what was known of
        those servers no longer holds."""
        return tuple(sorted((*self.removed, *self.changed)))

    def describe(self) -> str:
        parts = [f"{what} {', '.join(ids)}" for what, ids in (
            ("added", self.added), ("removed", self.removed), ("changed", self.changed),
            ("relabelled", self.relabelled)) if ids]
        return "; ".join(parts) if parts else "no worker changed"


def same_server(before: WorkerInfo, after: WorkerInfo) -> bool:
    """Whether two declarations of a worker are of one server: what it serves and where,
    on what hardware with what limits (labels, price, credentials may differ)."""
    return (before.url, before.gpu, before.models, before.model_spec, before.tensor_parallel,
            before.max_num_seqs, before.max_num_batched_tokens) == (
        after.url, after.gpu, after.models, after.model_spec, after.tensor_parallel,
        after.max_num_seqs, after.max_num_batched_tokens)


def fleet_change(before: Sequence[WorkerInfo], after: Sequence[WorkerInfo]) -> FleetChange:
    old = {info.id: info for info in before}
    new = {info.id: info for info in after}
    kept = [i for i in old.keys() & new.keys() if old[i] != new[i]]
    return FleetChange(
        added=tuple(sorted(new.keys() - old.keys())),
        removed=tuple(sorted(old.keys() - new.keys())),
        changed=tuple(sorted(i for i in kept if not same_server(old[i], new[i]))),
        relabelled=tuple(sorted(i for i in kept if same_server(old[i], new[i]))))


class WorkerRegistry:
    """Current snapshots of the fleet's workers. Owned by one event loop.

    The set of workers changes only by ``replace`` (a reloaded fleet file); ``info`` still
    answers for a worker removed since, for the requests it was serving."""

    __slots__ = ("_adapter_runners", "_by_id", "_default_model", "_failing", "_infos", "_retired",
                 "_runners", "_snapshots", "_unloaded", "inflight")

    def __init__(self, infos: Sequence[WorkerInfo], inflight: InflightSource) -> None:
        self._retired: dict[str, WorkerInfo] = {}
        self._snapshots: dict[str, WorkerSnapshot] = {}
        # workers whose last scrape failed -> their last good scrape (``unanswering``)
        self._failing: dict[str, float] = {}
        # worker -> adapters it answered it does not have, until its /v1/models is read again
        self._unloaded: dict[str, set[str]] = {}
        # LoRA adapter -> what the workers that have it run their models as (None: to build)
        self._adapter_runners: dict[str, frozenset[str]] | None = None
        self._set_infos(infos)
        self.inflight = inflight

    def _set_infos(self, infos: Sequence[WorkerInfo]) -> None:
        by_id = {info.id: info for info in infos}
        if len(by_id) != len(infos):
            raise ValueError("worker ids must be unique")
        self._infos = tuple(infos)
        self._by_id = by_id
        # model name -> what the fleet file declares it runs as: read once per fleet
        self._runners = runners_by_model(self._infos)
        self._adapter_runners = None
        models = {model for info in self._infos for model in info.models}
        self._default_model = next(iter(models)) if len(models) == 1 else None

    def replace(self, infos: Sequence[WorkerInfo],
                snapshots: Mapping[str, WorkerSnapshot] | None = None) -> FleetChange:
        """Take the workers of a reloaded fleet file. A worker of the same server as before
        keeps its snapshot (relabelled too); a removed or changed one loses it; a new or
        changed one takes its snapshot from ``snapshots`` (a probe just before), else is
        unknown until its next scrape. Raises ``ValueError`` on duplicate ids, changing
        nothing."""
        change = fleet_change(self._infos, infos)
        before = self._by_id
        self._set_infos(infos)
        for worker_id in change.gone:
            self._snapshots.pop(worker_id, None)
            self._failing.pop(worker_id, None)
            self._unloaded.pop(worker_id, None)
        for worker_id in change.removed:
            self._retired.pop(worker_id, None)          # (its place is at the end)
            self._retired[worker_id] = before[worker_id]
        for worker_id in (*change.added, *change.changed):
            snapshot = (snapshots or {}).get(worker_id)
            if snapshot is not None:
                self.update(snapshot, fresh=True)
        for info in self._infos:
            self._retired.pop(info.id, None)
        while len(self._retired) > MAX_RETIRED:       # workers named anew at each scale-up
            del self._retired[next(iter(self._retired))]
        return change

    @property
    def infos(self) -> tuple[WorkerInfo, ...]:
        return self._infos

    def default_model(self) -> str | None:
        """The model a request that names none is for, as vLLM serves its own: the one model
        of the fleet file when every worker serves that one alone; else None."""
        return self._default_model

    def info(self, worker_id: str) -> WorkerInfo:
        """The worker's declaration; for one a reloaded fleet file removed, its last one (its
        requests in flight still finish)."""
        info = self._by_id.get(worker_id)
        return info if info is not None else self._retired[worker_id]

    def unload_adapter(self, worker_id: str, adapter: str) -> None:
        """The worker answered that it does not have ``adapter`` (unloaded since its last
        ``/v1/models``): its snapshot no longer lists it, until a scrape says otherwise."""
        snapshot = self._snapshots.get(worker_id)
        if snapshot is not None and adapter in snapshot.lora_adapters:
            self._snapshots[worker_id] = dataclasses.replace(
                snapshot, lora_adapters=tuple(a for a in snapshot.lora_adapters
                                              if a != adapter),
                lora_paths=tuple(p for p in snapshot.lora_paths if p[0] != adapter))
            self._adapter_runners = None
        self._unloaded.setdefault(worker_id, set()).add(adapter)

    def unloaded_adapters(self, worker_id: str) -> frozenset[str]:
        """The adapters the worker answered it does not have since its ``/v1/models`` was
        last read (that read, cached, still lists them): to read it again at its next
        scrape, and not to list them meanwhile, whatever a failed read leaves."""
        unloaded = self._unloaded.get(worker_id)
        return frozenset(unloaded) if unloaded else frozenset()

    def models_read(self, worker_id: str) -> None:
        """The worker's ``/v1/models`` was read: it says which adapters it has."""
        self._unloaded.pop(worker_id, None)

    def declares(self, worker_id: str) -> bool:
        """Whether the fleet in force has the worker (not removed since)."""
        return worker_id in self._by_id

    def snapshot(self, worker_id: str) -> WorkerSnapshot | None:
        return self._snapshots.get(worker_id)

    def update(self, snapshot: WorkerSnapshot, fresh: bool) -> None:
        """Store a snapshot; ``fresh`` when it came from a successful scrape just now. A
        worker no longer in the fleet raises ``KeyError``."""
        if snapshot.worker_id not in self._by_id:
            raise KeyError(snapshot.worker_id)
        previous = self._snapshots.get(snapshot.worker_id)
        if previous is None or previous.lora_adapters != snapshot.lora_adapters:
            self._adapter_runners = None
        self._snapshots[snapshot.worker_id] = snapshot
        if snapshot.consecutive_failures > 0:
            self._failing[snapshot.worker_id] = snapshot.scraped_at
        else:
            self._failing.pop(snapshot.worker_id, None)
        if fresh:
            self.inflight.on_scrape(snapshot.worker_id)

    def unanswering(self) -> Mapping[str, float]:
        """The workers whose last scrape failed, each with the time of its last good scrape
        (-inf: none yet); the stall watch's ``unanswering`` (not a copy: read it at once)."""
        return self._failing

    def views(self, now: float) -> list[WorkerView]:
        snapshots = self._snapshots
        inflight = self.inflight
        return [build_view(info, snapshots.get(info.id), inflight.get(info.id), now)
                for info in self._infos]

    def runners_of(self, model: str) -> frozenset[str]:
        """What the fleet file declares the workers serving ``model`` run it as
        (``generate``, ``pooling``); for a LoRA adapter, what the workers that have it
        loaded run their models as; empty when no worker serves that name."""
        runners = self._runners.get(model)
        if runners is not None:
            return runners
        adapters = self._adapter_runners
        if adapters is None:       # built again only when some worker's adapters changed
            built: dict[str, set[str]] = {}
            for info in self._infos:
                snapshot = self._snapshots.get(info.id)
                for adapter in snapshot.lora_adapters if snapshot is not None else ():
                    for served in info.models:
                        built.setdefault(adapter, set()).update(self._runners.get(served, ()))
            adapters = self._adapter_runners = {a: frozenset(r) for a, r in built.items()}
        return adapters.get(model, frozenset())

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
