"""The worker registry: snapshots plus in-flight accounting into policy views."""

from __future__ import annotations

import pytest

from workers.engine.profiles import BUILTIN_GPUS, BUILTIN_MODELS
from workers.inflight import InflightTracker
from workers.models import WorkerInfo, WorkerSnapshot
from workers.registry import WorkerRegistry

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _info(worker_id: str) -> WorkerInfo:
    return WorkerInfo(id=worker_id, url=f"http://127.0.0.1/{worker_id}",
                      gpu=BUILTIN_GPUS["a100"], models=(MODEL,),
                      model_spec=BUILTIN_MODELS["llama-3-8b"], price_per_hour=2.0)


def test_views_combine_snapshot_and_inflight() -> None:
    inflight = InflightTracker()
    registry = WorkerRegistry([_info("a"), _info("b")], inflight)
    registry.update(WorkerSnapshot(worker_id="a", healthy=True, scraped_at=10.0, running=2,
                                   waiting=1, kv_usage=0.25, max_model_len=4096,
                                   served_models=(MODEL,), lora_adapters=("sql",)), fresh=True)
    inflight.on_dispatch("a", 100, 50)
    inflight.on_dispatch("a", 10, 5)
    a, b = registry.views(10.5)
    assert (a.id, a.healthy, a.running, a.waiting, a.kv_usage) == ("a", True, 2, 3, 0.25)
    assert (a.inflight_requests, a.inflight_tokens, a.max_model_len) == (2, 165, 4096)
    assert a.staleness_s == pytest.approx(0.5)
    assert (b.id, b.healthy, b.staleness_s) == ("b", False, float("inf"))
    assert registry.known_models() == {MODEL, "sql"}


def test_fresh_snapshot_resets_dispatched_since_scrape() -> None:
    inflight = InflightTracker()
    registry = WorkerRegistry([_info("a")], inflight)
    inflight.on_dispatch("a", 1, 1)
    snap = WorkerSnapshot(worker_id="a", healthy=True, scraped_at=1.0)
    registry.update(snap, fresh=False)
    assert registry.views(1.0)[0].waiting == 1
    registry.update(snap, fresh=True)
    assert registry.views(1.0)[0].waiting == 0
    assert registry.views(1.0)[0].inflight_requests == 1


def test_unknown_worker_and_duplicate_ids_rejected() -> None:
    registry = WorkerRegistry([_info("a")], InflightTracker())
    with pytest.raises(KeyError):
        registry.update(WorkerSnapshot(worker_id="zz", healthy=True, scraped_at=0.0), fresh=True)
    with pytest.raises(ValueError, match="unique"):
        WorkerRegistry([_info("a"), _info("a")], InflightTracker())


def test_runners_of_a_model_as_the_fleet_declares_them() -> None:
    import dataclasses

    embedder = dataclasses.replace(_info("e"), models=("embedder",),
                                   model_spec=BUILTIN_MODELS["all-minilm-l6-v2"])
    registry = WorkerRegistry([_info("a"), embedder, _info("b")], InflightTracker())
    assert registry.runners_of(MODEL) == {"generate"}
    assert registry.runners_of("embedder") == {"pooling"}
    assert registry.runners_of("nope") == frozenset()
