"""Which worker made each Responses API response: where its follow-ups must go.

vLLM keeps a response (with ``VLLM_ENABLE_RESPONSES_API_STORE``) in the memory of the server
that made it: ``previous_response_id``, ``GET /v1/responses/{id}`` and its ``cancel`` work
there only. ``ResponseOwners`` remembers ``response id -> worker id`` for the most recent
``capacity`` responses (least recently used forgotten first), so a router holds a bounded map
whatever the traffic. The Redis store shares the same map between replicas
(``router.state.redis_store``); this one is a replica's own.
"""

from __future__ import annotations

from collections import OrderedDict

DEFAULT_CAPACITY = 100_000


class ResponseOwners:
    """A bounded LRU map of response id to worker id."""

    __slots__ = ("_capacity", "_owners")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity: must be at least 1")
        self._capacity = capacity
        self._owners: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._owners)

    def remember(self, response_id: str, worker_id: str) -> None:
        self._owners[response_id] = worker_id
        self._owners.move_to_end(response_id)
        if len(self._owners) > self._capacity:
            self._owners.popitem(last=False)

    def owner(self, response_id: str) -> str | None:
        worker = self._owners.get(response_id)
        if worker is not None:
            self._owners.move_to_end(response_id)
        return worker
