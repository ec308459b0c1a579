"""The in-memory state store (the default, one replica) keeps the contract the Redis store's
tests check, seen from one replica: in-flight counts that follow each request's dispatch,
first token and end, a removed worker's entry dropped once it serves nothing, the owners of
responses and their tenants, and the budgets' usage. Each test runs against both stores (a
lone Redis replica against a real redis-server), so that they cannot drift apart."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from router.state.memory_store import MemoryStateStore
from router.state.redis_store import RedisStateStore
from router.state.response_owners import ResponseRecord
from router.state.store import StateStore
from workers.inflight import WorkerInflight


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.integration)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[StateStore]:
    made: StateStore
    if request.param == "memory":
        made = MemoryStateStore()
    else:
        made = RedisStateStore(request.getfixturevalue("redis_url"), "r1",
                               sync_interval_s=60)
    await made.start()
    try:
        yield made
    finally:
        await made.close()


def _counts(store: StateStore, worker: str) -> tuple[int, int, int, int]:
    entry = store.inflight.get(worker)
    return (entry.requests, entry.prefill_tokens, entry.decode_tokens,
            entry.dispatched_since_scrape)


async def test_in_flight_counts_follow_dispatch_first_token_and_end(store: StateStore) -> None:
    """What the policies see between scrapes: each dispatch at once, its prefill gone at its
    first token, the rest at its end; a scrape resets only the dispatches it has seen."""
    store.on_dispatch("w1", 100, 10)
    store.on_dispatch("w1", 50, 5)
    store.on_dispatch("w2", 1, 1)
    assert _counts(store, "w1") == (2, 150, 15, 2)
    assert store.local_requests("w1") == 2 and store.local_requests("w2") == 1
    store.on_first_token("w1", 100)                  # the first request's prefill is done
    assert _counts(store, "w1") == (2, 50, 15, 2)
    store.on_complete("w1", 0, 10)                   # and it ended: nothing left to prefill
    store.inflight.on_scrape("w1")
    assert _counts(store, "w1") == (1, 50, 5, 0)
    store.on_complete("w1", 50, 5)                   # ended before its first token
    assert _counts(store, "w1") == (0, 0, 0, 0)
    store.on_complete("w1", 50, 5)                   # one end too many: never below zero
    assert _counts(store, "w1") == (0, 0, 0, 0)
    assert _counts(store, "w2") == (1, 1, 1, 1)


async def test_a_forgotten_worker_leaves_once_it_serves_nothing(store: StateStore) -> None:
    """A worker the fleet file removed keeps counting down the requests it still serves,
    then its entry goes (a scaled-down fleet's workers were kept for ever)."""
    store.on_dispatch("gone", 10, 10)
    store.forget_worker("gone")                     # still serving one: kept, still counted
    assert _counts(store, "gone") == (1, 10, 10, 1)
    assert store.local_requests("gone") == 1
    store.on_complete("gone", 10, 10)
    assert _counts(store, "gone") == (0, 0, 0, 1)   # (its dispatch not yet scraped)
    store.forget_worker("gone")
    assert store.inflight.get("gone") == WorkerInflight()      # a new entry, from nothing


async def test_the_owner_of_a_response_and_its_tenant_are_kept(store: StateStore) -> None:
    """A Responses API follow-up goes to the worker that made its response, for the tenant
    that asked for it; one made again elsewhere (a retry) is found there."""
    await store.remember_response("resp_a", "w2", "acme")
    await store.remember_response("resp_b", "w1")
    assert await store.response_record("resp_a") == ResponseRecord("w2", "acme")
    assert await store.response_record("resp_b") == ResponseRecord("w1", None)
    assert await store.response_owner("resp_b") == "w1"
    assert await store.response_record("resp_c") is None
    assert await store.response_owner("resp_c") is None
    await store.remember_response("resp_a", "w3", "acme")
    assert await store.response_owner("resp_a") == "w3"


async def test_the_budgets_usage_is_kept_in_the_store(store: StateStore) -> None:
    """Admission charges and reads the budgets through the store's usage: what one charge
    adds is what the next read sees, for that budget alone."""
    usage = store.usage
    usage.add("acme", 100.0, requests=2, tokens=300)
    usage.add("*", 100.5, requests=4)
    assert store.usage.totals("acme", 101.0) == (2, 300)
    assert store.usage.totals("*", 101.0) == (4, 0)
    assert store.usage.totals("globex", 101.0) == (0, 0)
    assert store.usage.totals("acme", 160.0) == (0, 0)        # a minute later: gone


async def test_a_store_alone_says_so() -> None:
    """One replica, nothing shared: never set aside, no failed command, nothing left to
    save, and what it routes is not learnt back as another replica's."""
    store = MemoryStateStore()
    learnt: list[str] = []
    store.follow_routed(lambda worker, blocks: learnt.append(worker))
    await store.start()
    store.on_routed_blocks("w1", {16: [1, 2, 3]})
    await store.remember_response("resp_a", "w1")
    assert (store.replicas, store.degraded, store.errors) == (1, False, 0)
    assert (store.unsaved_owners, store.sync_seconds, store.routed_shared) == (0, 0.0, (0, 0))
    assert learnt == []
    await store.close()
