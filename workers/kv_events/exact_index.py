"""Each worker's exact set of cached blocks, rebuilt from its KV-event stream.

Sequence numbers (8-byte big-endian, from 0 per publisher) make the stream checkable:

* ``seq == last + 1``: apply.
* ``seq == 0`` after something else: the publisher restarted, so its cache is empty: clear.
* ``seq <= last``: a duplicate (a replay overlapping the live stream): ignore.
* ``seq > last + 1``: a gap. The worker becomes *inexact*, later batches are held back, and
  ``on_batch`` returns the sequence number to replay from. Replayed batches fill the hole and
  the held ones follow in order; once contiguous the worker is exact again. If the replay
  cannot fill the hole (``on_replay_done``), the held batches are applied and the worker stays
  inexact until its cache is cleared (``AllBlocksCleared`` or a restart), because a lost batch
  may have stored or removed anything.
* a first batch after 0: the router subscribed to an engine that was already serving (a
  router restarted, or a replica added). A replay from 0 is asked for; what it cannot bring
  back is the engine's history before the router joined, not a loss: the held batches (if
  contiguous) are applied and the worker is exact from there. Blocks stored before the join
  are unknown, so its count may fall short of what the engine holds, never above it (a removal
  of an unknown block changes nothing), which the approximate index, as blind to that history,
  does not promise.

While a worker is inexact ``match`` returns ``None`` and the prefix scorer uses the
approximate index instead. Only GPU-resident blocks count (medium ``GPU``).

A worker's blocks are the keys of a plain dict (values None), not a set: a dict of ints and
None is left untracked by the garbage collector, so millions of held blocks add nothing to a
full collection's pause of the event loop, where a set's items would all be walked.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from itertools import repeat

from workers.engine.api import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from workers.kv_events.decode import KvEventBatch

DEVICE_MEDIA = frozenset({"GPU"})


@dataclass(slots=True)
class WorkerEventState:
    blocks: dict[int, None] = field(default_factory=dict)   # a set the collector skips
    last_seq: int | None = None
    gap_open: bool = False       # waiting for a replay to fill a hole
    lost: bool = False           # a batch was lost for good: unknown until the next clear
    held: dict[int, KvEventBatch] = field(default_factory=dict)
    batches: int = 0
    gaps: int = 0

    @property
    def exact(self) -> bool:
        return self.last_seq is not None and not self.gap_open and not self.lost


class ExactPrefixIndex:
    """Exact per-worker block sets fed by KV events. Owned by one thread or event loop."""

    __slots__ = ("_max_blocks", "_max_held", "_workers")

    def __init__(self, max_blocks_per_worker: int = 1 << 22,
                 max_held_batches: int = 10_000) -> None:
        self._workers: dict[str, WorkerEventState] = {}
        self._max_blocks = max_blocks_per_worker
        self._max_held = max_held_batches

    def state(self, worker_id: str) -> WorkerEventState:
        entry = self._workers.get(worker_id)
        if entry is None:
            entry = self._workers[worker_id] = WorkerEventState()
        return entry

    def workers(self) -> list[str]:
        return list(self._workers)

    # --- stream input ----------------------------------------------------------------------
    def on_batch(self, worker_id: str, seq: int, batch: KvEventBatch) -> int | None:
        """Take one batch; returns the sequence number to replay from when a gap opened."""
        entry = self.state(worker_id)
        entry.batches += 1
        last = entry.last_seq
        if last is not None and seq == 0 and last != -1:
            self._reset(entry)                       # publisher restarted: its cache is empty
            self._apply(entry, 0, batch)
            return None
        expected = 0 if last is None else last + 1
        if seq < expected:
            entry.held.pop(seq, None)
            return None                              # duplicate
        if seq == expected:
            entry.held.pop(seq, None)
            self._apply(entry, seq, batch)
            self._drain(entry)
            return None
        entry.held[seq] = batch                      # a hole before this batch
        if len(entry.held) > self._max_held:
            self.on_replay_done(worker_id)
            return None
        if entry.gap_open:
            return None                              # replay already requested
        entry.gap_open = True
        entry.gaps += 1
        if last is None:
            entry.last_seq = -1                      # nothing applied yet; replay from 0
        return expected

    def apply_events(self, worker_id: str, events: Sequence[KVEvent]) -> None:
        """Apply events handed over in process, in order (the simulator's engines): no
        sequence numbers, nothing can be lost, so the worker is exact."""
        entry = self.state(worker_id)
        seq = 0 if entry.last_seq is None or entry.last_seq < 0 else entry.last_seq + 1
        self._apply(entry, seq, KvEventBatch(ts=0.0, events=tuple(events)))

    def on_replay_done(self, worker_id: str) -> None:
        """The replay ended (or none is possible): apply what is held; an unfilled hole
        between batches ⇒ lost, one before the first batch seen (a late join) ⇒ exact from
        there."""
        entry = self.state(worker_id)
        if not entry.gap_open and not entry.held:
            return
        if entry.held:
            seqs = sorted(entry.held)
            joined_late = entry.last_seq == -1 and seqs[-1] - seqs[0] == len(seqs) - 1
            if not joined_late:
                entry.lost = True
            for seq in seqs:
                self._apply(entry, seq, entry.held[seq])
            entry.held.clear()
        entry.gap_open = False

    def forget(self, worker_id: str) -> None:
        """Drop what is known of the worker (its engine restarted): its next batch starts it
        again, as a restart (seq 0) or a late join (``on_replay_done``)."""
        entry = self._workers.get(worker_id)
        if entry is not None:
            self._reset(entry)

    # --- queries ---------------------------------------------------------------------------
    def is_exact(self, worker_id: str) -> bool:
        entry = self._workers.get(worker_id)
        return entry is not None and entry.exact

    def match(self, worker_id: str, block_hashes: Sequence[int]) -> int | None:
        """Leading blocks the worker surely holds; ``None`` when its set is not exact."""
        entry = self._workers.get(worker_id)
        if entry is None or not entry.exact:
            return None
        return leading_blocks(block_hashes, entry.blocks)

    def blocks(self, worker_id: str) -> int:
        entry = self._workers.get(worker_id)
        return len(entry.blocks) if entry is not None else 0

    def holds(self, worker_id: str, block_hash: int) -> bool:
        entry = self._workers.get(worker_id)
        return entry is not None and block_hash in entry.blocks

    # --- internals -------------------------------------------------------------------------
    def _drain(self, entry: WorkerEventState) -> None:
        assert entry.last_seq is not None
        while entry.held:
            batch = entry.held.pop(entry.last_seq + 1, None)
            if batch is None:
                return
            self._apply(entry, entry.last_seq + 1, batch)
        entry.gap_open = False

    def _apply(self, entry: WorkerEventState, seq: int, batch: KvEventBatch) -> None:
        blocks = entry.blocks
        for event in batch.events:
            if isinstance(event, BlockStored):
                if event.medium in DEVICE_MEDIA:
                    blocks.update(dict.fromkeys(event.block_hashes))
            elif isinstance(event, BlockRemoved):
                if event.medium in DEVICE_MEDIA:
                    deque(map(blocks.pop, event.block_hashes, repeat(None)), maxlen=0)
            elif isinstance(event, AllBlocksCleared):
                blocks.clear()
                entry.lost = False
        if len(blocks) > self._max_blocks:
            blocks.clear()                           # a stream that never removes: distrust it
            entry.lost = True
        entry.last_seq = seq

    @staticmethod
    def _reset(entry: WorkerEventState) -> None:
        entry.blocks.clear()
        entry.held.clear()
        entry.gap_open = False
        entry.lost = False
        entry.last_seq = None


def leading_blocks(block_hashes: Sequence[int], held: Container[int]) -> int:
    """How many blocks of the chain, from block 0 up to the first missing one, ``held`` has."""
    for matched, block_hash in enumerate(block_hashes):
        if block_hash not in held:
            return matched
    return len(block_hashes)
