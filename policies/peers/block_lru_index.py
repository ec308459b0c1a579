"""A per-worker LRU set of prefix-block hashes, as llm-d's approximate prefix indexer keeps.

llm-d (``approximateprefix`` data producer; peer-routers.md §2.3) records, for the endpoint a
request was sent to, every block hash of its prompt in that endpoint's LRU (capacity
``lru_capacity_per_server`` blocks, default 31,250) and answers "which endpoints hold this
hash". ``match_blocks`` is its greedy ``matchLongestPrefix``: walk the request's hashes from
the first while *any* endpoint holds the hash, counting one block for every endpoint holding
it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class BlockLruIndex:
    __slots__ = ("_capacity", "_holders", "_lru")

    def __init__(self, capacity_per_server: int) -> None:
        self._capacity = capacity_per_server
        self._lru: dict[str, OrderedDict[int, None]] = {}
        self._holders: dict[int, set[str]] = {}

    def add(self, hashes: Sequence[int], server: str) -> None:
        lru = self._lru.setdefault(server, OrderedDict())
        for block_hash in hashes:
            if block_hash in lru:
                lru.move_to_end(block_hash)
                continue
            lru[block_hash] = None
            self._holders.setdefault(block_hash, set()).add(server)
            if len(lru) > self._capacity:
                evicted, _ = lru.popitem(last=False)
                holders = self._holders[evicted]
                holders.discard(server)
                if not holders:
                    del self._holders[evicted]

    def match_blocks(self, hashes: Sequence[int]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for block_hash in hashes:
            holders = self._holders.get(block_hash)
            if not holders:
                break
            for server in holders:
                counts[server] = counts.get(server, 0) + 1
        return counts

    def blocks_held(self, server: str) -> int:
        return len(self._lru.get(server, ()))
