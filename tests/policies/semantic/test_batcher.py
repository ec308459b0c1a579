"""Micro-batching on the embedding thread, with a counting embed function (pure logic)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from policies.semantic.batcher import BatcherOverloaded, MicroBatcher
from policies.semantic.cache import EmbeddingCache


class CountingEmbedder:
    """Embeds text i as [len(text)]; records every batch; can be held at a gate."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        self.entered.set()
        self.gate.wait(5)
        self.batches.append(list(texts))
        return np.array([[float(len(t))] for t in texts], dtype=np.float32)


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


def test_concurrent_texts_share_one_batch(embedder: CountingEmbedder) -> None:
    batcher = MicroBatcher(embedder, EmbeddingCache(16), window_s=0.2, max_batch=8)
    try:
        futures = [batcher.submit(t) for t in ("a", "bb", "ccc", "dddd")]
        results = [f.result(timeout=5) for f in futures]
    finally:
        batcher.close()
    assert embedder.batches == [["a", "bb", "ccc", "dddd"]]
    assert [r[0] for r in results] == [1.0, 2.0, 3.0, 4.0]
    assert batcher.stats.batches == 1 and batcher.stats.largest_batch == 4


def test_max_batch_splits_batches(embedder: CountingEmbedder) -> None:
    batcher = MicroBatcher(embedder, EmbeddingCache(16), window_s=0.2, max_batch=2)
    try:
        for f in [batcher.submit(t) for t in ("a", "b", "c")]:
            f.result(timeout=5)
    finally:
        batcher.close()
    assert embedder.batches == [["a", "b"], ["c"]]


def test_cache_hit_and_in_flight_sharing(embedder: CountingEmbedder) -> None:
    batcher = MicroBatcher(embedder, EmbeddingCache(16), window_s=0.0, max_batch=8)
    try:
        embedder.gate.clear()
        first = batcher.submit("same")
        second = batcher.submit("same")          # shares the computation in flight
        assert second is first
        embedder.gate.set()
        first.result(timeout=5)
        third = batcher.submit("same")           # answered from the cache
        assert third.done()
        assert third.result()[0] == 4.0
    finally:
        batcher.close()
    assert embedder.batches == [["same"]]
    assert batcher.cache.hits == 1


def test_full_queue_is_refused_and_late_texts_are_dropped(embedder: CountingEmbedder) -> None:
    batcher = MicroBatcher(embedder, EmbeddingCache(16), window_s=0.0, max_batch=1, max_queue=2)
    try:
        embedder.gate.clear()
        running = batcher.submit("running")
        assert embedder.entered.wait(5)          # the thread holds "running" at the gate
        late = batcher.submit("late", timeout_s=0.01)
        queued = batcher.submit("queued")
        with pytest.raises(BatcherOverloaded):
            batcher.submit("one too many")
        time.sleep(0.05)                          # "late" passes its deadline while waiting
        embedder.gate.set()
        assert running.result(timeout=5)[0] == 7.0
        assert queued.result(timeout=5)[0] == 6.0
        with pytest.raises(TimeoutError):
            late.result(timeout=5)
    finally:
        batcher.close()
    assert embedder.batches == [["running"], ["queued"]]
    assert batcher.stats.expired == 1


def test_a_failing_model_fails_its_batch_only() -> None:
    calls: list[int] = []

    def flaky(texts: Sequence[str]) -> np.ndarray:
        calls.append(len(texts))
        if len(calls) == 1:
            raise RuntimeError("boom")
        return np.ones((len(texts), 2), dtype=np.float32)

    batcher = MicroBatcher(flaky, EmbeddingCache(4), window_s=0.0)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            batcher.submit("a").result(timeout=5)
        assert batcher.submit("b").result(timeout=5).tolist() == [1.0, 1.0]
        assert batcher.running
    finally:
        batcher.close()
    assert not batcher.running
    with pytest.raises(RuntimeError):
        batcher.submit("after close")
