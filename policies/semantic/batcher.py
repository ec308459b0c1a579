"""Micro-batching of embedding requests across concurrent requests, on one dedicated thread.

``submit(text)`` returns a ``concurrent.futures.Future`` of the text's embedding at once. A
cached text resolves immediately; a text already being embedded shares that computation.
Otherwise the text joins the queue of the embedding thread, which takes the oldest queued
text, gathers every text that arrives within ``window_s`` of it (at most ``max_batch``) and
embeds them in one forward pass. Texts that queued while the previous batch was running have
already waited, so they are taken without a further wait.

Event-loop callers await ``asyncio.wrap_future(batcher.submit(text))``; the loop never runs
the model. ``stats`` counts batches and texts for tests and benchmarks.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from policies.semantic.cache import EmbeddingCache, Vector, text_key

log = logging.getLogger(__name__)

EmbedFunction = Callable[[Sequence[str]], npt.NDArray[np.float32]]


@dataclass(slots=True)
class BatcherStats:
    batches: int = 0
    texts: int = 0
    largest_batch: int = 0
    batch_sizes: list[int] = field(default_factory=list)   # the last 1024 batches

    def record(self, size: int) -> None:
        self.batches += 1
        self.texts += size
        self.largest_batch = max(self.largest_batch, size)
        self.batch_sizes.append(size)
        if len(self.batch_sizes) > 1024:
            del self.batch_sizes[:512]


@dataclass(slots=True)
class _Pending:
    key: bytes
    text: str
    future: Future[Vector]
    queued_at: float


class MicroBatcher:
    """Embeds submitted texts in batches on its own thread; ``close()`` stops it."""

    def __init__(self, embed: EmbedFunction, cache: EmbeddingCache, *, window_s: float = 0.002,
                 max_batch: int = 16, thread_name: str = "kvroute-semantic-embed") -> None:
        if window_s < 0 or max_batch < 1:
            raise ValueError("window_s must be >= 0 and max_batch >= 1")
        self._embed = embed
        self.cache = cache
        self.window_s = window_s
        self.max_batch = max_batch
        self.stats = BatcherStats()
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._in_flight: dict[bytes, Future[Vector]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    def submit(self, text: str) -> Future[Vector]:
        """The embedding of ``text``, now (cache hit) or when its batch has run."""
        key = text_key(text)
        cached = self.cache.get(key)
        if cached is not None:
            done: Future[Vector] = Future()
            done.set_result(cached)
            return done
        with self._lock:
            if self._closed:
                raise RuntimeError("the embedding thread is stopped")
            shared = self._in_flight.get(key)
            if shared is not None:
                return shared
            future: Future[Vector] = Future()
            self._in_flight[key] = future
        self._queue.put(_Pending(key, text, future, time.monotonic()))
        return future

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread after the queued texts are embedded."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._queue.put(None)
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                break
            batch, stopping = self._gather(first)
            self._embed_batch(batch)

    def _gather(self, first: _Pending) -> tuple[list[_Pending], bool]:
        batch = [first]
        deadline = first.queued_at + self.window_s
        while len(batch) < self.max_batch:
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _embed_batch(self, batch: list[_Pending]) -> None:
        self.stats.record(len(batch))
        try:
            vectors = self._embed([item.text for item in batch])
        except Exception as exc:   # the model failed: every waiter learns it, the thread lives on
            log.exception("embedding a batch of %d texts failed", len(batch))
            self._finish(batch, None, exc)
            return
        self._finish(batch, vectors, None)

    def _finish(self, batch: list[_Pending], vectors: npt.NDArray[np.float32] | None,
                error: BaseException | None) -> None:
        for i, item in enumerate(batch):
            with self._lock:
                self._in_flight.pop(item.key, None)
            if item.future.cancelled():
                continue
            if vectors is None:
                item.future.set_exception(error or RuntimeError("no embedding"))
                continue
            vector: Vector = vectors[i]
            self.cache.put(item.key, vector)
            item.future.set_result(vector)
