"""The approximate prefix index: what each worker probably caches, learnt from routing alone.

Every routed request's block hashes are inserted for the worker it went to. Each worker has
a bounded LRU sized from its KV capacity (``num_gpu_blocks`` of its view, less vLLM's null
block), and a reverse map ``hash → workers`` answers "who holds this block" in one lookup, so
a longest-prefix match costs a few lookups per worker whatever the fleet size. Memory is
bounded by the sum of the workers' capacities, whatever the traffic.

Eviction imitates vLLM's free queue (``vllm-interface.md`` §4.2): a finished request's blocks
return to the LRU tail in reverse order, so within one request the tail blocks are evicted
before the head. Insertion therefore touches a chain tail first, leaving block 0 the most
recently used.

Chains are chained hashes (each block's hash covers every block before it, as vLLM's do and
``policies.producers.blocks`` makes them), so a block is only ever inserted together with all
the blocks before it, and touched before them. Each of those is then at least as recently used
as it, and the LRU drops it first. What a worker holds of any chain is therefore a prefix of
that chain, which is what lets ``match`` bisect instead of walking every block.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence

from policies.base import RoutingRequest

NULL_BLOCKS = 1   # vLLM reserves block 0 of the pool; it never holds a cached block


class WorkerBlockLru:
    """The blocks one worker probably holds, least recently used first."""

    __slots__ = ("_blocks", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._blocks

    def touch(self, block_hash: int) -> bool:
        """Mark a block most recently used; returns True when it was new."""
        blocks = self._blocks
        if block_hash in blocks:
            blocks.move_to_end(block_hash)
            return False
        blocks[block_hash] = None
        return True

    def evict_overflow(self) -> list[int]:
        """Drop least recently used blocks until within capacity; returns the dropped ones."""
        dropped: list[int] = []
        blocks = self._blocks
        while len(blocks) > self.capacity:
            dropped.append(blocks.popitem(last=False)[0])
        return dropped

    def hashes(self) -> list[int]:
        return list(self._blocks)


class ApproximatePrefixIndex:
    """Per-worker LRUs of block hashes plus a reverse map for fleet-wide prefix matching."""

    __slots__ = ("_default_capacity", "_holders", "_workers")

    def __init__(self, default_capacity_blocks: int = 16384) -> None:
        if default_capacity_blocks < 1:
            raise ValueError("default_capacity_blocks must be >= 1")
        self._default_capacity = default_capacity_blocks
        self._workers: dict[str, WorkerBlockLru] = {}
        # block -> its one holder, or a set when several hold it (most blocks have one: a
        # string is no container for the garbage collector to scan, a set per block is)
        self._holders: dict[int, str | set[str]] = {}

    # --- sizing ----------------------------------------------------------------------------
    @staticmethod
    def capacity_for(num_gpu_blocks: int, default: int) -> int:
        """Blocks a worker can cache: its pool less the null block, or ``default`` if unknown."""
        return num_gpu_blocks - NULL_BLOCKS if num_gpu_blocks > NULL_BLOCKS else default

    def set_capacity(self, worker_id: str, num_gpu_blocks: int) -> None:
        """Resize a worker's LRU from its view's ``num_gpu_blocks`` (evicts if it shrank)."""
        lru = self._lru(worker_id)
        capacity = self.capacity_for(num_gpu_blocks, self._default_capacity)
        if capacity != lru.capacity:
            lru.capacity = capacity
            self._forget(worker_id, lru.evict_overflow())

    # --- updates ---------------------------------------------------------------------------
    def insert(self, worker_id: str, block_hashes: Sequence[int]) -> None:
        """Record that ``worker_id`` now caches this chain (head most recently used)."""
        lru = self._lru(worker_id)
        holders = self._holders
        for block_hash in reversed(block_hashes):
            if lru.touch(block_hash):
                owners = holders.get(block_hash)
                if owners is None:
                    holders[block_hash] = worker_id
                elif isinstance(owners, str):
                    if owners != worker_id:
                        holders[block_hash] = {owners, worker_id}
                else:
                    owners.add(worker_id)
        self._forget(worker_id, lru.evict_overflow())

    def remove_worker(self, worker_id: str) -> None:
        lru = self._workers.pop(worker_id, None)
        if lru is not None:
            self._forget(worker_id, lru.hashes())

    def clear_worker(self, worker_id: str) -> None:
        """Forget everything a worker holds but keep its capacity (e.g. its cache was reset)."""
        lru = self._workers.get(worker_id)
        if lru is not None:
            capacity = lru.capacity
            self.remove_worker(worker_id)
            self._workers[worker_id] = WorkerBlockLru(capacity)

    # --- queries ---------------------------------------------------------------------------
    def match(self, block_hashes: Sequence[int],
              worker_ids: Collection[str]) -> dict[str, int]:
        """Leading blocks of the chain each worker holds, in O(log chain) lookups per worker.

        Workers absent from the result hold none; a worker's match stops at its first miss,
        as vLLM's ``find_longest_cache_hit`` does. ``worker_ids``: any collection; a set or
        a dict keyed by id answers ``in`` fastest.

        What a worker holds of a chain is always a prefix of it (see the module docstring),
        so "every worker still matching holds block k" is true up to some k and false after:
        the end of the run they share is found by bisection, then the workers that miss the
        next block drop out and the rest search on. One reverse-map lookup per probe serves
        every worker at once.
        """
        result: dict[str, int] = {}
        holders = self._holders
        length = len(block_hashes)
        if not length:
            return result
        first = holders.get(block_hashes[0])
        if not first:
            return result
        if isinstance(first, str):
            alive = {first} if first in worker_ids else set()
        else:
            alive = {worker_id for worker_id in first if worker_id in worker_ids}
        held = 1       # every worker in ``alive`` holds blocks [0, held)
        while alive:
            low, high = held, length     # the first block some alive worker misses
            single = next(iter(alive)) if len(alive) == 1 else None
            while low < high:
                middle = (low + high) // 2
                owners = holders.get(block_hashes[middle])
                if owners is None:
                    shared = False
                elif isinstance(owners, str):
                    shared = owners == single
                else:
                    shared = alive <= owners
                if shared:
                    low = middle + 1
                else:
                    high = middle
            if low == length:
                for worker_id in alive:
                    result[worker_id] = length
                break
            owners = holders.get(block_hashes[low])
            if owners is None:
                kept: set[str] = set()
            elif isinstance(owners, str):
                kept = {owners} if owners in alive else set()
            else:
                kept = alive & owners
            for worker_id in alive:
                if worker_id not in kept:
                    result[worker_id] = low
            alive, held = kept, low + 1
        return result

    def blocks(self, worker_id: str) -> int:
        lru = self._workers.get(worker_id)
        return len(lru) if lru is not None else 0

    def capacity(self, worker_id: str) -> int:
        lru = self._workers.get(worker_id)
        return lru.capacity if lru is not None else self._default_capacity

    def holds(self, worker_id: str, block_hash: int) -> bool:
        lru = self._workers.get(worker_id)
        return lru is not None and block_hash in lru

    def total_blocks(self) -> int:
        return sum(len(lru) for lru in self._workers.values())

    def distinct_blocks(self) -> int:
        return len(self._holders)

    # --- internals -------------------------------------------------------------------------
    def _lru(self, worker_id: str) -> WorkerBlockLru:
        lru = self._workers.get(worker_id)
        if lru is None:
            lru = self._workers[worker_id] = WorkerBlockLru(self._default_capacity)
        return lru

    def _forget(self, worker_id: str, dropped: Iterable[int]) -> None:
        holders = self._holders
        for block_hash in dropped:
            owners = holders.get(block_hash)
            if owners is None:
                continue
            if isinstance(owners, str):
                if owners == worker_id:
                    del holders[block_hash]
                continue
            owners.discard(worker_id)
            if len(owners) == 1:
                holders[block_hash] = next(iter(owners))
            elif not owners:
                del holders[block_hash]


def routed_chain(block_sizes: Mapping[str, int], request: RoutingRequest,
                 worker_id: str) -> Sequence[int] | None:
    """The request's block hashes at ``worker_id``'s block size (vLLM's default 16 until a
    view of that worker has been seen); None or empty when it has none."""
    return request.block_hashes.get(block_sizes.get(worker_id, 16))


def remember_routed(index: ApproximatePrefixIndex, block_sizes: Mapping[str, int],
                    request: RoutingRequest, worker_id: str | None) -> None:
    """Record that ``worker_id`` now holds the request's blocks, hashed at its block size."""
    if worker_id is None:
        return
    chain = routed_chain(block_sizes, request, worker_id)
    if chain:
        index.insert(worker_id, chain)
