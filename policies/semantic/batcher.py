"""Micro-batching of embedding requests across concurrent requests, on one dedicated thread.

``submit(text)`` returns a ``concurrent.futures.Future`` of the text's embedding at once. A
cached text resolves immediately; a text already being embedded shares that computation.
Otherwise the text joins the queue of the embedding thread, which takes the oldest queued
text, gathers every text that arrives within ``window_s`` of it (at most ``max_batch``) and
embeds them in one forward pass. Texts that queued while the previous batch was running have
already waited, so they are taken without a further wait.

Overload never builds an unbounded backlog: ``submit`` refuses a text when ``max_queue`` texts
are already waiting (``BatcherOverloaded``), and a text whose caller has stopped waiting (its
``deadline`` passed) is dropped from its batch instead of being embedded.

Event-loop callers await ``asyncio.wrap_future(batcher.submit(text))``; the loop never runs
the model. ``stats`` counts batches, texts and the embedding thread's CPU time.
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


class BatcherOverloaded(RuntimeError):
    """Too many texts are already waiting for the embedding thread."""


@dataclass(slots=True)
class BatcherStats:
    batches: int = 0
    texts: int = 0
    expired: int = 0          # dropped: their caller had stopped waiting
    largest_batch: int = 0
    cpu_s: float = 0.0        # CPU time the embedding thread spent in the model
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
    deadline: float


class MicroBatcher:
    """Embeds submitted texts in batches on its own thread; ``close()`` stops it."""

    def __init__(self, embed: EmbedFunction, cache: EmbeddingCache, *, window_s: float = 0.002,
                 max_batch: int = 16, max_queue: int = 256,
                 thread_name: str = "kvroute-semantic-embed") -> None:
        if window_s < 0 or max_batch < 1 or max_queue < 1:
            raise ValueError("window_s must be >= 0, max_batch and max_queue >= 1")
        self._embed = embed
        self.cache = cache
        self.window_s = window_s
        self.max_batch = max_batch
        self.max_queue = max_queue
        self._waiting = 0
        self.stats = BatcherStats()
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._in_flight: dict[bytes, Future[Vector]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    def submit(self, text: str, timeout_s: float = 60.0) -> Future[Vector]:
        """The embedding of ``text``, now (cache hit) or when its batch has run.

        The text is dropped unembedded if its batch starts more than ``timeout_s`` from now.
        """
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
            if self._waiting >= self.max_queue:
                raise BatcherOverloaded(f"{self._waiting} texts already wait for embedding")
            self._waiting += 1
            future: Future[Vector] = Future()
            self._in_flight[key] = future
        now = time.monotonic()
        self._queue.put(_Pending(key, text, future, now, now + timeout_s))
        return future

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop the thread after the queued texts are embedded; wait for it unless
        ``timeout`` is None."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._queue.put(None)
        if timeout is not None:
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
        with self._lock:
            self._waiting -= len(batch)
        now = time.monotonic()
        expired = [item for item in batch if item.deadline < now or item.future.cancelled()]
        if expired:
            self.stats.expired += len(expired)
            self._finish(expired, None, TimeoutError("waited too long for the embedding thread"))
            batch = [item for item in batch if item not in expired]
            if not batch:
                return
        self.stats.record(len(batch))
        cpu_start = time.thread_time()
        try:
            vectors = self._embed([item.text for item in batch])
        except Exception as exc:   # the model failed: every waiter learns it, the thread lives on
            log.exception("embedding a batch of %d texts failed", len(batch))
            self._finish(batch, None, exc)
            return
        finally:
            self.stats.cpu_s += time.thread_time() - cpu_start
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
