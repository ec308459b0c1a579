"""The bounded map of Responses API response ids to the workers that made them."""

from __future__ import annotations

import pytest

from router.state.memory_store import MemoryStateStore
from router.state.response_owners import ResponseOwners


def test_the_least_recently_used_owner_is_forgotten_first() -> None:
    owners = ResponseOwners(capacity=3)
    for i in range(3):
        owners.remember(f"resp_{i}", f"w{i}")
    assert owners.owner("resp_0") == "w0"          # used: now the most recent
    owners.remember("resp_3", "w3")
    assert len(owners) == 3
    assert owners.owner("resp_1") is None
    assert [owners.owner(f"resp_{i}") for i in (0, 2, 3)] == ["w0", "w2", "w3"]
    owners.remember("resp_2", "w9")                 # made again elsewhere (a retry)
    assert owners.owner("resp_2") == "w9" and len(owners) == 3


def test_a_map_holds_at_least_one() -> None:
    with pytest.raises(ValueError, match="capacity"):
        ResponseOwners(capacity=0)


async def test_the_memory_store_keeps_owners() -> None:
    store = MemoryStateStore()
    await store.remember_response("resp_a", "w1")
    assert await store.response_owner("resp_a") == "w1"
    assert await store.response_owner("resp_b") is None
