"""The block hashes of requests routed to each worker and not finished yet.

A worker's KV events report a prompt's blocks only as its prefill computes them, so for a
moment after routing the exact index does not know what the worker is about to hold: a
second request with the same prefix, arriving in that moment, would see no cache anywhere.
Until the request finishes, though, its blocks cannot leave the worker's cache (vLLM frees
a request's blocks when it ends, and only free blocks are evicted). So for a worker followed
by KV events, the prefix it holds is the longer of what its events say and what its
unfinished requests will have stored (``policies.prefix.matching``).

Bounded: at most ``max_requests`` requests are kept; past that the oldest are forgotten, so a
completion that never comes (a plugin error, a lost outcome) cannot grow it for ever.
"""

from __future__ import annotations

from collections.abc import Sequence

from workers.kv_events.exact_index import leading_blocks


class InflightBlocks:
    """Per worker, how many unfinished routed requests hold each block hash."""

    __slots__ = ("_counts", "_requests", "max_requests")

    def __init__(self, max_requests: int = 65_536) -> None:
        if max_requests < 1:
            raise ValueError("max_requests must be >= 1")
        self.max_requests = max_requests
        self._counts: dict[str, dict[int, int]] = {}
        # (request id, worker id) -> its chain; insertion order is routing order
        self._requests: dict[tuple[str, str], Sequence[int]] = {}

    def __len__(self) -> int:
        return len(self._requests)

    def add(self, request_id: str, worker_id: str, chain: Sequence[int]) -> None:
        """``request_id`` was routed to ``worker_id`` with these block hashes."""
        key = (request_id, worker_id)
        if key in self._requests:
            self.remove(request_id, worker_id)
        self._requests[key] = chain
        counts = self._counts.get(worker_id)
        if counts is None:
            counts = self._counts[worker_id] = {}
        get = counts.get
        for block_hash in chain:
            counts[block_hash] = get(block_hash, 0) + 1
        while len(self._requests) > self.max_requests:
            self.remove(*next(iter(self._requests)))

    def remove(self, request_id: str, worker_id: str) -> None:
        """``request_id`` ended on ``worker_id`` (unknown: nothing to do)."""
        chain = self._requests.pop((request_id, worker_id), None)
        if chain is None:
            return
        counts = self._counts[worker_id]
        for block_hash in chain:
            left = counts[block_hash] - 1
            if left:
                counts[block_hash] = left
            else:
                del counts[block_hash]
        if not counts:
            del self._counts[worker_id]

    def match(self, worker_id: str, chain: Sequence[int]) -> int:
        """Leading blocks of ``chain`` that an unfinished request on ``worker_id`` holds."""
        counts = self._counts.get(worker_id)
        return leading_blocks(chain, counts) if counts else 0

    def blocks(self, worker_id: str) -> int:
        """Distinct block hashes held by ``worker_id``'s unfinished requests."""
        counts = self._counts.get(worker_id)
        return len(counts) if counts else 0
