"""The infinite-cache prefix ceiling: the hit rate one fleet-wide prefix cache would reach.

For every first routing attempt that found a worker and whose request carries block hashes
(the ``blocks`` producer runs whenever a prefix-aware plugin is configured), the leading
blocks already seen in an earlier request count as hits. Requests no worker takes (an unknown
model, a prompt longer than every context window) are not served, so they do not count.
Workers' own ``vllm:prefix_cache_hits`` / ``queries`` show what routing achieved; this shows
what was there to win. "Infinite" is bounded by ``capacity`` block hashes (the first seen
forgotten first) so memory stays fixed.

Nothing here is walked by the garbage collector: the hashes seen are the keys of a plain
dict whose keys and values are ints and None, which CPython leaves untracked, and the order
they were first seen in is an ``array('Q')`` read from a moving start. A set and a deque of
the same 262,144 ints added 14–19 ms to every full collection, a pause of the event loop
(``kvroute bench gc-walk``).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from policies.base import Decision, RoutingRequest
from router.metrics import RouterMetrics

DEFAULT_CAPACITY = 1 << 18      # 262,144 blocks: 4.2 M prompt tokens at 16-token blocks


class PrefixCeiling:
    """Counts ceiling hits into ``RouterMetrics``; a decision sink of the director."""

    __slots__ = ("_capacity", "_first", "_metrics", "_order", "_seen")

    def __init__(self, metrics: RouterMetrics, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity <= 0:
            raise ValueError("capacity: must be positive")
        self._metrics = metrics
        self._capacity = capacity
        self._seen: dict[int, None] = {}
        # first seen first, from ``_first`` on: forgetting reads the next one in O(1), and
        # the forgotten front is cut off once it is as long as the capacity (deleting a
        # dict's first key instead would walk every slot deleted before it, quadratic once
        # the capacity is reached)
        self._order = array("Q")
        self._first = 0

    def observe(self, block_hashes: Sequence[int], block_size: int) -> int:
        """Record one prompt's full blocks; return how many leading blocks were seen before."""
        seen, order = self._seen, self._order
        hits = 0
        while hits < len(block_hashes) and block_hashes[hits] in seen:
            hits += 1
        for h in block_hashes[hits:]:      # the leading hits are known already
            if h not in seen:
                seen[h] = None
                order.append(h)
        excess = len(seen) - self._capacity
        if excess > 0:
            first = self._first
            for h in order[first:first + excess]:
                del seen[h]
            first += excess
            if first >= self._capacity:
                del order[:first]
                first = 0
            self._first = first
        return hits

    def on_decision(self, request: RoutingRequest, decision: Decision, attempt: int,
                    seconds: float, routing_sha256: str | None = None) -> None:
        if (attempt != 0 or decision.worker_id is None or not request.block_hashes
                or request.num_prompt_tokens <= 0):
            return      # counted once per request, and only for requests a worker serves
        block_size = min(request.block_hashes)
        hits = self.observe(request.block_hashes[block_size], block_size)
        self._metrics.record_prefix_ceiling(hits * block_size, request.num_prompt_tokens)
