"""The ``StateStore`` protocol: the router's mutable routing state behind one interface.

A store owns the in-flight accounting the policies see through ``WorkerView``s. The request
path reads and writes only the local ``inflight`` tracker (never awaits a store); a shared
store (several replicas) synchronises it off the request path, so a decision never waits
on the network. The memory store is the default for one replica.

Replicas also share what each routed where (``on_routed_blocks``, ``follow_routed``), so the
``prefix`` scorer of each knows what the others sent to every worker's cache.

One thing is awaited on the request path, and only by Responses API requests that continue
or read a response: which worker made it (``response_owner``), since only that worker can
serve them. Recording an owner (``remember_response``) never waits on the network.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from router.admission.usage import TenantUsage
from router.state.response_owners import ResponseRecord
from workers.registry import InflightSource


class StateStore(Protocol):
    """In-flight counters, tenant budgets' usage and Responses API owners."""

    @property
    def inflight(self) -> InflightSource:
        """The counts the worker registry builds views from."""
        ...

    @property
    def usage(self) -> TenantUsage:
        """What each tenant budget spent over the last minute (``router.admission``)."""
        ...

    @property
    def degraded(self) -> bool:
        """True when a shared backend is unreachable and only local state is used."""
        ...

    @property
    def replicas(self) -> int:
        """Replicas sharing their state through this store, this one included (1: alone)."""
        ...

    @property
    def errors(self) -> int:
        """Commands to a shared backend that failed so far."""
        ...

    @property
    def unsaved_owners(self) -> int:
        """Response owners recorded here and not yet written to a shared backend."""
        ...

    @property
    def sync_seconds(self) -> float:
        """How long the last exchange of counts with a shared backend took (0: none)."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def on_dispatch(self, worker_id: str, prefill_tokens: int, decode_tokens: int) -> None: ...

    def forget_worker(self, worker_id: str) -> None:
        """A reloaded fleet file removed the worker (or put another server under its id): its
        counts are no longer shared (the requests it still serves end as usual)."""
        ...

    def local_requests(self, worker_id: str) -> int:
        """Requests this router has sent the worker and not seen finish (not the other
        replicas')."""
        ...

    def on_first_token(self, worker_id: str, prefill_tokens: int) -> None: ...

    def on_complete(self, worker_id: str, prefill_tokens_left: int,
                    decode_tokens: int) -> None: ...

    def on_routed_blocks(self, worker_id: str,
                         block_hashes: Mapping[int, Sequence[int]]) -> None:
        """This replica sent a prompt of these block hashes (block size -> chain) to
        ``worker_id``: shared with the other replicas, never awaited."""
        ...

    def follow_routed(self, learn: Callable[[str, Mapping[int, Sequence[int]]], None]) -> None:
        """Call ``learn(worker_id, block_hashes)`` for each prompt another replica routed."""
        ...

    @property
    def routed_shared(self) -> tuple[int, int]:
        """Prompts' block hashes published to the other replicas so far, and learnt from
        them."""
        ...

    async def remember_response(self, response_id: str, worker_id: str,
                                tenant: str | None = None) -> None:
        """Record that ``worker_id`` makes the Responses API response ``response_id``, for
        the tenant whose key asked (None: not a tenant's key)."""
        ...

    async def response_record(self, response_id: str) -> ResponseRecord | None:
        """The worker that made ``response_id`` and its tenant, if known
        (``router.state.response_owners``)."""
        ...

    async def response_owner(self, response_id: str) -> str | None:
        """The worker that made ``response_id``, if known."""
        ...
