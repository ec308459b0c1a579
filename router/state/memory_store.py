"""The in-process ``StateStore``: one replica, state in this process only (the default)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from router.admission.usage import TenantUsage
from router.state.response_owners import ResponseOwners, ResponseRecord
from workers.inflight import InflightTracker


class MemoryStateStore:
    """In-flight counters held in a local ``InflightTracker``, budgets' usage in a
    ``TenantUsage``, response owners in a ``ResponseOwners`` map."""

    __slots__ = ("_inflight", "_owners", "_usage")

    def __init__(self) -> None:
        self._inflight = InflightTracker()
        self._owners = ResponseOwners()
        self._usage = TenantUsage()

    @property
    def inflight(self) -> InflightTracker:
        return self._inflight

    @property
    def usage(self) -> TenantUsage:
        return self._usage

    @property
    def degraded(self) -> bool:
        return False

    @property
    def replicas(self) -> int:
        return 1

    @property
    def errors(self) -> int:
        return 0

    @property
    def unsaved_owners(self) -> int:
        return 0

    @property
    def sync_seconds(self) -> float:
        return 0.0

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def on_dispatch(self, worker_id: str, prefill_tokens: int, decode_tokens: int) -> None:
        self._inflight.on_dispatch(worker_id, prefill_tokens, decode_tokens)

    def on_first_token(self, worker_id: str, prefill_tokens: int) -> None:
        self._inflight.on_first_token(worker_id, prefill_tokens)

    def on_complete(self, worker_id: str, prefill_tokens_left: int, decode_tokens: int) -> None:
        self._inflight.on_complete(worker_id, prefill_tokens_left, decode_tokens)

    def on_routed_blocks(self, worker_id: str,
                         block_hashes: Mapping[int, Sequence[int]]) -> None:
        return None      # no other replica to tell

    def follow_routed(self, learn: Callable[[str, Mapping[int, Sequence[int]]], None]) -> None:
        return None

    @property
    def routed_shared(self) -> tuple[int, int]:
        return 0, 0

    def forget_worker(self, worker_id: str) -> None:
        self._inflight.forget(worker_id)

    def local_requests(self, worker_id: str) -> int:
        return self._inflight.get(worker_id).requests

    async def remember_response(self, response_id: str, worker_id: str,
                                tenant: str | None = None) -> None:
        self._owners.remember(response_id, worker_id, tenant)

    async def response_record(self, response_id: str) -> ResponseRecord | None:
        return self._owners.record(response_id)

    async def response_owner(self, response_id: str) -> str | None:
        return self._owners.owner(response_id)
