"""Subscribe to every worker's KV-event PUB socket and keep the exact index current.

One asyncio task per worker: a SUB socket connected to the worker's endpoint (subscribed to
its topic) reads ``[topic, seq, payload]`` multiparts. When the index reports a gap and the
worker has a replay endpoint, a DEALER socket asks it for everything from the missing
sequence number on (a REQ envelope, ``[b"", start]``, the start 8 bytes big-endian, as
vLLM's publisher requires) and reads
``[b"", topic, seq, payload]`` (or the older ``[b"", seq, payload]``) until the end marker
``seq = 2**64 - 1``; see ``vllm-interface.md`` §3.2. Undecodable payloads count as lost
batches. ``follow(sources)`` changes the streams followed (a reloaded fleet file) without
disturbing the others. ``stop()`` closes every socket; the context is owned here.

```python
subscriber = KvEventSubscriber(index, [KvEventSource("h100-0", "tcp://127.0.0.1:5557",
                                                     replay_endpoint="tcp://127.0.0.1:5558")])
await subscriber.start()
...
await subscriber.stop()
```
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import zmq
import zmq.asyncio

from workers.kv_events.decode import KvEventBatch, KvEventDecodeError, decode_batch
from workers.kv_events.exact_index import ExactPrefixIndex

END_OF_REPLAY = 0xFFFF_FFFF_FFFF_FFFF


async def _stopped(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel every task, then wait for them all (a task's own failure is logged, not
    raised: stopping or changing streams never fails for one of them)."""
    for task in tasks:
        task.cancel()
    for outcome in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(outcome, Exception):
            _log.error("kv events: a stream's task had failed: %r", outcome)
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KvEventSource:
    worker_id: str
    endpoint: str                       # e.g. "tcp://10.0.0.5:5557" (the PUB socket)
    replay_endpoint: str | None = None  # e.g. "tcp://10.0.0.5:5558" (the ROUTER socket)
    topic: str = ""


@dataclass(slots=True)
class SubscriberCounters:
    batches: int = 0
    decode_errors: int = 0
    replays: int = 0
    replayed_batches: int = 0


class KvEventSubscriber:
    """Feeds an ``ExactPrefixIndex`` from ZMQ streams until ``stop()``."""

    def __init__(self, index: ExactPrefixIndex, sources: Sequence[KvEventSource],
                 replay_timeout_s: float = 2.0) -> None:
        self.index = index
        self.sources = tuple(sources)
        self.replay_timeout_s = replay_timeout_s
        self.counters: dict[str, SubscriberCounters] = {
            s.worker_id: SubscriberCounters() for s in self.sources}
        self._context: zmq.asyncio.Context | None = None
        # worker id -> the source its task follows, and the task
        self._tasks: dict[str, tuple[KvEventSource, asyncio.Task[None]]] = {}
        self._connected: dict[str, asyncio.Event] = {}

    async def start(self) -> None:
        self._context = zmq.asyncio.Context()
        await self.follow(self.sources)

    async def follow(self, sources: Sequence[KvEventSource]) -> None:
        """Follow these streams from now on (a reloaded fleet file): a stream no longer
        listed, or listed with another endpoint or topic, is closed; a new one is connected
        (returns once each new SUB socket is); the others go on undisturbed."""
        assert self._context is not None, "start() first"
        wanted = {source.worker_id: source for source in sources}
        leaving = {worker_id: task for worker_id, (source, task) in self._tasks.items()
                   if wanted.get(worker_id) != source}
        for worker_id in leaving:
            del self._tasks[worker_id]
            self._connected.pop(worker_id, None)
            self.counters.pop(worker_id, None)     # a stream that comes back counts afresh
        await _stopped(list(leaving.values()))   # all cancelled at once: none reads on
        started: list[asyncio.Event] = []
        for worker_id, source in wanted.items():
            if worker_id in self._tasks:
                continue
            self.counters.setdefault(worker_id, SubscriberCounters())
            event = self._connected[worker_id] = asyncio.Event()
            started.append(event)
            self._tasks[worker_id] = (source, asyncio.create_task(
                self._follow(source), name=f"kv-events-{worker_id}"))
        self.sources = tuple(sources)
        await asyncio.gather(*(event.wait() for event in started))

    async def stop(self) -> None:
        tasks = [task for _source, task in self._tasks.values()]
        self._tasks.clear()
        await _stopped(tasks)
        if self._context is not None:
            self._context.term()
            self._context = None

    async def __aenter__(self) -> KvEventSubscriber:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- per worker ------------------------------------------------------------------------
    async def _follow(self, source: KvEventSource) -> None:
        assert self._context is not None
        socket = self._context.socket(zmq.SUB)
        try:
            socket.setsockopt(zmq.LINGER, 0)
            # without it ZMQ resolves tcp://[::1]:P and IPv6 names to nothing and delivers
            # nothing, silently; IPv4 endpoints work as before
            socket.setsockopt(zmq.IPV6, 1)
            socket.setsockopt(zmq.SUBSCRIBE, source.topic.encode())
            socket.connect(source.endpoint)
        except zmq.ZMQError as exc:       # an endpoint ZMQ cannot take: nothing to follow
            _log.error("kv events: cannot follow %s at %s: %s", source.worker_id,
                       source.endpoint, exc)
            socket.close(linger=0)
            return
        finally:
            self._connected[source.worker_id].set()    # whoever waits for it goes on
        try:
            while True:
                frames = await socket.recv_multipart()
                if len(frames) < 3:
                    continue
                await self._take(source, frames[-2], frames[-1], replaying=False)
        finally:
            socket.close(linger=0)

    async def _take(self, source: KvEventSource, seq_frame: bytes, payload: bytes,
                    replaying: bool) -> None:
        counters = self.counters[source.worker_id]
        seq = int.from_bytes(seq_frame, "big")
        counters.batches += 1
        batch = self._decode(source, payload)
        if batch is None:
            batch = KvEventBatch(ts=0.0, events=())
            self.index.state(source.worker_id).lost = True
        replay_from = self.index.on_batch(source.worker_id, seq, batch)
        if replay_from is None or replaying:
            return
        if source.replay_endpoint is None:
            self.index.on_replay_done(source.worker_id)
            return
        counters.replays += 1
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that lands as
            # the replay completes, and stop() would then wait forever on this task
            async with asyncio.timeout(self.replay_timeout_s):
                await self._replay(source, replay_from)
        except TimeoutError:
            _log.warning("kv events: replay from %s timed out", source.worker_id)
        self.index.on_replay_done(source.worker_id)

    async def _replay(self, source: KvEventSource, start: int) -> None:
        assert self._context is not None and source.replay_endpoint is not None
        socket = self._context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.IPV6, 1)          # as the live stream's: IPv6 endpoints too
        socket.connect(source.replay_endpoint)
        try:
            # a REQ socket's envelope (an empty delimiter first): vLLM's publisher drops a
            # request of any other shape, unanswered
            await socket.send_multipart([b"", start.to_bytes(8, "big")])
            while True:
                frames = await socket.recv_multipart()
                if frames and frames[0] == b"":
                    frames = frames[1:]
                if len(frames) < 2:
                    continue
                seq_frame, payload = frames[-2], frames[-1]
                if int.from_bytes(seq_frame, "big") == END_OF_REPLAY:
                    return
                self.counters[source.worker_id].replayed_batches += 1
                await self._take(source, seq_frame, payload, replaying=True)
        finally:
            socket.close(linger=0)

    def _decode(self, source: KvEventSource, payload: bytes) -> KvEventBatch | None:
        try:
            return decode_batch(payload)
        except KvEventDecodeError as exc:
            self.counters[source.worker_id].decode_errors += 1
            _log.warning("kv events from %s: %s", source.worker_id, exc)
            return None
