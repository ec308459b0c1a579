"""The approximate prefix index: what each worker probably caches, learnt from routing alone.

Every routed request's block hashes are inserted for the worker it went to. Each worker has
a bounded LRU sized from its KV capacity (``num_gpu_blocks`` of its view, less vLLM's null
block), and a reverse map ``hash → holders`` (a bit mask, one bit per worker) answers "who
holds this block" in one lookup, so a longest-prefix match costs a few lookups per worker
whatever the fleet size. Memory is bounded by the sum of the workers' capacities, whatever
the traffic.

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

import heapq
from collections import OrderedDict, deque
from collections.abc import Collection, Iterable, Mapping, Sequence

from policies.base import RoutingRequest

NULL_BLOCKS = 1   # vLLM reserves block 0 of the pool; it never holds a cached block
MASK_CACHE_IDS = 65_536   # worker ids kept for the holder masks seen last (see _ids_in)


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
    """Per-worker LRUs of block hashes plus a reverse map for fleet-wide prefix matching.

    The reverse map holds, per block, a bit mask of its holders: each worker known to the
    index has a slot, and bit ``slot`` is set when it holds the block. A mask is an ``int``,
    which the garbage collector does not track, so blocks shared by several workers add no
    container for it to scan, and "every worker still matching holds this block" is one
    ``&``. A block with a single holder maps to that worker's own bit object (no allocation).
    """

    __slots__ = ("_bits", "_cached_ids", "_default_capacity", "_free_slots", "_holders",
                 "_ids_of_mask", "_slot_bits", "_slot_ids", "_workers")

    def __init__(self, default_capacity_blocks: int = 16384) -> None:
        if default_capacity_blocks < 1:
            raise ValueError("default_capacity_blocks must be >= 1")
        self._default_capacity = default_capacity_blocks
        self._workers: dict[str, WorkerBlockLru] = {}
        self._holders: dict[int, int] = {}          # block -> mask of its holders' bits
        self._bits: dict[str, int] = {}             # worker id -> its bit, 1 << slot
        self._slot_bits: list[int] = []             # slot -> 1 << slot (one object each)
        self._slot_ids: list[str | None] = []       # slot -> worker id (None: free)
        self._free_slots: list[int] = []            # heap: the lowest free slot is reused
        # mask -> its workers' ids: the same few masks (who holds a popular prefix) come back
        # decision after decision; emptied when a slot changes hands or it grows too large
        self._ids_of_mask: dict[int, tuple[str, ...]] = {}
        self._cached_ids = 0                        # ids held in _ids_of_mask, bounded

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
        bit = self._bits[worker_id]
        holders = self._holders
        blocks = lru._blocks
        # ``touch`` each block, tail first. What a worker holds of a chain is a prefix of it
        # (module docstring), so the new tail is added block by block and the held head
        # moved to the end in one C-level pass
        held = len(block_hashes)
        while held and (block_hash := block_hashes[held - 1]) not in blocks:
            blocks[block_hash] = None
            owners = holders.get(block_hash)
            holders[block_hash] = bit if owners is None else owners | bit
            held -= 1
        if held:
            head = block_hashes[:held]
            try:
                deque(map(blocks.move_to_end, reversed(head)), maxlen=0)
            except KeyError:     # not a held prefix after all: block by block, the same order
                for block_hash in reversed(head):     # (moving again leaves the same order)
                    if lru.touch(block_hash):
                        owners = holders.get(block_hash)
                        holders[block_hash] = bit if owners is None else owners | bit
        self._forget(worker_id, lru.evict_overflow())

    def remove_worker(self, worker_id: str) -> None:
        lru = self._workers.pop(worker_id, None)
        if lru is not None:
            self._forget(worker_id, lru.hashes())
        bit = self._bits.pop(worker_id, None)
        if bit is not None:
            slot = bit.bit_length() - 1
            self._slot_ids[slot] = None
            heapq.heappush(self._free_slots, slot)
            self._forget_masks()

    def clear_worker(self, worker_id: str) -> None:
        """Forget everything a worker holds but keep its capacity (e.g. its cache was reset)."""
        lru = self._workers.get(worker_id)
        if lru is not None:
            capacity = lru.capacity
            self.remove_worker(worker_id)
            self._lru(worker_id).capacity = capacity

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
        next block drop out and the rest search on. One reverse-map lookup and one ``&`` per
        probe serve every worker at once.
        """
        result: dict[str, int] = {}
        holders = self._holders
        length = len(block_hashes)
        if not length:
            return result
        first = holders.get(block_hashes[0])
        if not first:
            return result
        alive = self._restricted(first, worker_ids)
        held = 1       # every worker in ``alive`` holds blocks [0, held)
        while alive:
            low, high = held, length     # the first block some alive worker misses
            while low < high:
                middle = (low + high) // 2
                owners = holders.get(block_hashes[middle])
                if owners is not None and (owners & alive) == alive:
                    low = middle + 1
                else:
                    high = middle
            if low == length:
                for worker_id in self._ids_in(alive):
                    result[worker_id] = length
                break
            owners = holders.get(block_hashes[low])
            kept = alive & owners if owners is not None else 0
            for worker_id in self._ids_in(alive ^ kept):     # those that miss block ``low``
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

    def slots_in_use(self) -> int:
        """Workers holding a bit of the holder masks (each widens every shared block's)."""
        return len(self._bits)

    # --- internals -------------------------------------------------------------------------
    def _lru(self, worker_id: str) -> WorkerBlockLru:
        lru = self._workers.get(worker_id)
        if lru is None:
            lru = self._workers[worker_id] = WorkerBlockLru(self._default_capacity)
            self._assign_slot(worker_id)
        return lru

    def _assign_slot(self, worker_id: str) -> None:
        if self._free_slots:
            slot = heapq.heappop(self._free_slots)
            self._slot_ids[slot] = worker_id
        else:
            slot = len(self._slot_ids)
            self._slot_ids.append(worker_id)
            self._slot_bits.append(1 << slot)
        self._bits[worker_id] = self._slot_bits[slot]
        self._forget_masks()

    def _forget(self, worker_id: str, dropped: Iterable[int]) -> None:
        bit = self._bits.get(worker_id)
        if bit is None:
            return
        holders = self._holders
        slot_bits = self._slot_bits
        for block_hash in dropped:
            owners = holders.get(block_hash)
            if owners is None or not owners & bit:
                continue
            rest = owners ^ bit
            if not rest:
                del holders[block_hash]
            elif rest & (rest - 1):
                holders[block_hash] = rest
            else:      # one holder left: its own bit object, not a copy
                holders[block_hash] = slot_bits[rest.bit_length() - 1]

    def _restricted(self, mask: int, worker_ids: Collection[str]) -> int:
        """The bits of ``mask`` whose workers are in ``worker_ids`` (cost: the holders)."""
        bits = self._bits
        for worker_id in [w for w in self._ids_in(mask) if w not in worker_ids]:
            mask ^= bits[worker_id]
        return mask

    def _ids_in(self, mask: int) -> tuple[str, ...]:
        """The ids of the workers whose bits are set in ``mask``."""
        known = self._ids_of_mask.get(mask)
        if known is not None:
            return known
        slot_ids = self._slot_ids
        text = bin(mask)               # "0b1...": bit 0 is the last character
        last = len(text) - 1
        ids = []
        at = text.find("1", 2)
        while at != -1:
            worker_id = slot_ids[last - at]
            if worker_id is not None:
                ids.append(worker_id)
            at = text.find("1", at + 1)
        if self._cached_ids + len(ids) > MASK_CACHE_IDS:
            self._forget_masks()
        known = self._ids_of_mask[mask] = tuple(ids)
        self._cached_ids += len(known)
        return known

    def _forget_masks(self) -> None:
        self._ids_of_mask.clear()
        self._cached_ids = 0


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
