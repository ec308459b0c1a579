"""The router's KV-event feed: the fleet's KV-event streams kept as one exact prefix index.

Workers whose fleet entry names a ``kv_events:`` endpoint (vLLM's ``--kv-events-config``
publisher, or the emulator's ``--kv-events``) are followed by one ``KvEventSubscriber``; the
``ExactPrefixIndex`` it feeds is handed to every prefix plugin of every policy engine the
router builds, the first one and each hot-reloaded one (``attach``); a reloaded fleet file
changes the streams followed (``set_workers``). Prefix scorers then use
a worker's exact block set while its stream is whole and fall back to their approximate
routing history when a gap is open (``workers/kv_events/exact_index.py``). With no such
worker the feed is inert: no index, no sockets.

```python
feed = KvEventFeed([spec.info for spec in fleet.workers])
feed.attach(engine)                  # PolicyReloader(on_swap=feed.on_new_engine) after reloads
await feed.start()
feed.status()                        # per worker: exact?, blocks, batches, gaps
await feed.stop()
```
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workers.kv_events.exact_index import ExactPrefixIndex
from workers.kv_events.subscriber import KvEventSubscriber
from workers.kv_events.wiring import attach, sources_for
from workers.models import WorkerInfo


class KvEventFeed:
    """One exact index for the fleet, its subscriber, and the engines it is attached to."""

    def __init__(self, workers: Iterable[WorkerInfo]) -> None:
        self.sources = sources_for(workers)
        self.index: ExactPrefixIndex | None = ExactPrefixIndex() if self.sources else None
        self._subscriber: KvEventSubscriber | None = None
        self._started = False        # start() was called: new streams are followed at once

    @property
    def enabled(self) -> bool:
        return self.index is not None

    def attach(self, engine: Any) -> int:
        """Hand the index to ``engine``'s prefix plugins; how many took it (0 when inert)."""
        return attach(engine, self.index) if self.index is not None else 0

    def forget(self, worker_id: str) -> None:
        """The worker's engine restarted (``WorkerScraper``'s ``on_engine_lost``): drop its
        block set and follow its stream afresh, so that the new engine is not taken for the
        cache of the one before it until its first batch arrives."""
        if self.index is not None:
            self.index.forget(worker_id)

    def on_new_engine(self, engine: Any) -> None:
        """``PolicyReloader``'s ``on_swap`` hook: a hot-reloaded engine gets the index too."""
        self.attach(engine)

    async def start(self) -> None:
        """Connect to every stream (returns once each SUB socket is connected)."""
        self._started = True
        if self.index is None or self._subscriber is not None:
            return
        self._subscriber = KvEventSubscriber(self.index, self.sources)
        await self._subscriber.start()

    async def set_workers(self, workers: Iterable[WorkerInfo], gone: Iterable[str],
                          engine: Any) -> None:
        """A reloaded fleet file: follow the streams the new fleet names, the others
        undisturbed, then forget the block sets of the workers ``gone`` (removed, or another
        server under their id) and of those whose stream went or moved. A fleet naming
        streams for the first time gets its index now, handed to ``engine`` (the one in
        force)."""
        sources = sources_for(workers)
        before = {source.worker_id: source for source in self.sources}
        now = {source.worker_id: source for source in sources}
        # a stream that goes or moves: what it said is not what the next one will
        gone = {*gone, *(worker for worker, source in before.items() if now.get(worker) != source)}
        if sources != self.sources:
            self.sources = sources
            if self.index is None:
                self.index = ExactPrefixIndex()
                self.attach(engine)
            if self._started and self._subscriber is None:
                self._subscriber = KvEventSubscriber(self.index, self.sources)
                await self._subscriber.start()
            elif self._started and self._subscriber is not None:
                await self._subscriber.follow(self.sources)   # the streams that go have stopped
        for worker_id in gone:      # (after: a stream going could still have read a batch)
            self.forget(worker_id)

    async def stop(self) -> None:
        self._started = False
        if self._subscriber is not None:
            await self._subscriber.stop()
            self._subscriber = None

    def status(self) -> dict[str, dict[str, Any]]:
        """Per followed worker: whether its block set is exact now, and its counters."""
        if self.index is None:
            return {}
        counters = self._subscriber.counters if self._subscriber is not None else {}
        out: dict[str, dict[str, Any]] = {}
        for source in self.sources:
            state = self.index.state(source.worker_id)
            counted = counters.get(source.worker_id)
            out[source.worker_id] = {
                "endpoint": source.endpoint, "exact": state.exact,
                "blocks": len(state.blocks), "batches": state.batches, "gaps": state.gaps,
                "decode_errors": counted.decode_errors if counted else 0,
                "replays": counted.replays if counted else 0,
            }
        return out
