"""Which worker made each Responses API response: where its follow-ups must go.

vLLM keeps a response (with ``VLLM_ENABLE_RESPONSES_API_STORE``) in the memory of the server
that made it: ``previous_response_id``, ``GET /v1/responses/{id}`` and its ``cancel`` work
there only. ``ResponseOwners`` remembers ``response id -> (worker id, tenant)`` for the most
recent ``capacity`` responses (least recently used forgotten first), so a router holds a
bounded map whatever the traffic. The tenant is the one a tenant key named (None otherwise):
another tenant's key may not read, cancel or continue the response. The Redis store shares
the same map between replicas (``router.state.redis_store``); this one is a replica's own.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

DEFAULT_CAPACITY = 100_000


class ResponseRecord(NamedTuple):
    """Where a response lives, and the tenant whose key made it (None: no tenant key)."""

    worker: str
    tenant: str | None = None

    def refuses(self, tenant: str | None) -> bool:
        """Whether a request of the tenant key ``tenant`` (None: not a tenant's key) is kept
        from it: another tenant's response."""
        return self.tenant is not None and tenant is not None and tenant != self.tenant


class ResponseOwners:
    """A bounded LRU map of response id to its record."""

    __slots__ = ("_capacity", "_owners")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity: must be at least 1")
        self._capacity = capacity
        self._owners: OrderedDict[str, ResponseRecord] = OrderedDict()

    def __len__(self) -> int:
        return len(self._owners)

    def remember(self, response_id: str, worker_id: str, tenant: str | None = None) -> None:
        self._owners[response_id] = ResponseRecord(worker_id, tenant)
        self._owners.move_to_end(response_id)
        if len(self._owners) > self._capacity:
            self._owners.popitem(last=False)

    def record(self, response_id: str) -> ResponseRecord | None:
        record = self._owners.get(response_id)
        if record is not None:
            self._owners.move_to_end(response_id)
        return record

    def owner(self, response_id: str) -> str | None:
        record = self.record(response_id)
        return record.worker if record is not None else None
