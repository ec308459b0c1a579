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
    # an adapter runs as the model of the workers that have it loaded (its embeddings were
    # forwarded to a generate worker, whose bare 404 the client got, not the router's 400)
    registry.update(WorkerSnapshot(worker_id="b", healthy=True, scraped_at=1.0,
                                   lora_adapters=("sql",)), fresh=True)
    assert registry.runners_of("sql") == {"generate"}


def test_replace_keeps_the_snapshots_of_workers_declared_as_before() -> None:
    """A reloaded fleet file: added, removed and changed workers; a removed worker's
    declaration still answers ``info`` (its requests in flight finish)."""
    inflight = InflightTracker()
    a, b, c = _info("a"), _info("b"), _info("c")
    registry = WorkerRegistry([a, b, c], inflight)
    for worker in "abc":
        registry.update(WorkerSnapshot(worker_id=worker, healthy=True, scraped_at=1.0,
                                       running=3), fresh=True)
    b_moved = WorkerInfo(id="b", url="http://127.0.0.1/b-elsewhere", gpu=BUILTIN_GPUS["h100"],
                         models=(MODEL,), model_spec=BUILTIN_MODELS["llama-3-8b"],
                         price_per_hour=3.0)
    a_again = _info("a")            # equal, not the same object: declared as before
    change = registry.replace([a_again, b_moved, _info("d")])
    assert (change.added, change.removed, change.changed) == (("d",), ("c",), ("b",))
    assert change.gone == ("b", "c")
    assert change.describe() == "added d; removed c; changed b"
    assert [v.id for v in registry.views(1.0)] == ["a", "b", "d"]
    assert registry.snapshot("a") is not None and registry.views(1.0)[0].running == 3
    assert registry.snapshot("b") is None and not registry.views(1.0)[1].healthy
    assert registry.info("c") is c and registry.info("b") is b_moved
    with pytest.raises(KeyError):
        registry.update(WorkerSnapshot(worker_id="c", healthy=True, scraped_at=2.0),
                        fresh=True)
    assert not registry.replace([a_again, b_moved, _info("d")])
    registry.replace([_info("c")])               # back again: no longer retired
    assert registry.info("c") is not c and registry.snapshot("c") is None


def test_replace_with_duplicate_ids_changes_nothing() -> None:
    registry = WorkerRegistry([_info("a")], InflightTracker())
    with pytest.raises(ValueError, match="unique"):
        registry.replace([_info("b"), _info("b")])
    assert [info.id for info in registry.infos] == ["a"]


def test_a_single_model_fleet_gains_a_default_model_only_while_it_serves_one() -> None:
    registry = WorkerRegistry([_info("a")], InflightTracker())
    assert registry.default_model() == MODEL
    other = WorkerInfo(id="e", url="http://127.0.0.1/e", gpu=BUILTIN_GPUS["a100"],
                       models=("other",), model_spec=BUILTIN_MODELS["llama-3-8b"],
                       price_per_hour=2.0)
    registry.replace([_info("a"), other])
    assert registry.default_model() is None
    assert registry.runners_of("other") == frozenset({"generate"})


def test_a_relabelled_worker_keeps_its_snapshot() -> None:
    """Labels, price, key, CA bundle, KV-event stream: the same server; its snapshot stays
    (dropped, every worker relabelled at once was unhealthy until its next scrape)."""
    registry = WorkerRegistry([_info("a")], InflightTracker())
    registry.update(WorkerSnapshot(worker_id="a", healthy=True, scraped_at=1.0), fresh=True)
    relabelled = WorkerInfo(id="a", url="http://127.0.0.1/a", gpu=BUILTIN_GPUS["a100"],
                            models=(MODEL,), model_spec=BUILTIN_MODELS["llama-3-8b"],
                            price_per_hour=2.5, labels={"zone": "b"}, api_key_env="KEY_A",
                            kv_events_endpoint="tcp://127.0.0.1:5557")
    change = registry.replace([relabelled])
    assert (change.changed, change.relabelled, change.gone) == ((), ("a",), ())
    assert change.describe() == "relabelled a"
    assert registry.views(1.0)[0].healthy and registry.info("a") is relabelled


def test_an_adapter_a_worker_answered_it_lacks_stays_off_until_its_models_are_read() -> None:
    """A failed read of /v1/models after such an answer brought the adapter back from the
    cached read, and the flag to read it again was spent."""
    registry = WorkerRegistry([_info("a")], InflightTracker())
    registry.update(WorkerSnapshot(worker_id="a", healthy=True, scraped_at=1.0,
                                   lora_adapters=("fin", "sql")), fresh=True)
    assert registry.runners_of("fin") == {"generate"}
    registry.unload_adapter("a", "fin")
    snapshot = registry.snapshot("a")
    assert snapshot is not None and snapshot.lora_adapters == ("sql",)
    assert registry.runners_of("fin") == frozenset()        # the cache built again
    assert registry.unloaded_adapters("a") == {"fin"}
    assert registry.unloaded_adapters("a") == {"fin"}         # asking does not spend it
    registry.models_read("a")
    assert registry.unloaded_adapters("a") == frozenset()
