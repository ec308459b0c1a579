"""The blocks of unfinished requests per worker: counted, matched, released, bounded."""

from __future__ import annotations

import pytest

from policies.prefix.inflight import InflightBlocks


def test_match_counts_the_leading_blocks_an_unfinished_request_holds() -> None:
    inflight = InflightBlocks()
    inflight.add("a", "w1", [1, 2, 3])
    assert inflight.match("w1", [1, 2, 3, 4]) == 3
    assert inflight.match("w1", [1, 9, 3]) == 1
    assert inflight.match("w1", [9, 2, 3]) == 0
    assert inflight.match("w2", [1, 2, 3]) == 0


def test_a_shared_block_stays_until_the_last_request_holding_it_ends() -> None:
    inflight = InflightBlocks()
    inflight.add("a", "w1", [1, 2, 3])
    inflight.add("b", "w1", [1, 2, 7])
    inflight.remove("a", "w1")
    assert inflight.match("w1", [1, 2, 3]) == 2
    assert inflight.match("w1", [1, 2, 7]) == 3
    inflight.remove("b", "w1")
    assert inflight.match("w1", [1, 2, 7]) == 0
    assert inflight.blocks("w1") == 0 and len(inflight) == 0


def test_removal_is_per_worker_and_unknown_requests_are_ignored() -> None:
    inflight = InflightBlocks()
    inflight.add("a", "w1", [1, 2])
    inflight.add("a", "w2", [1, 2])          # a retry elsewhere
    inflight.remove("a", "w1")
    inflight.remove("never-routed", "w1")
    assert inflight.match("w1", [1, 2]) == 0
    assert inflight.match("w2", [1, 2]) == 2


def test_routing_the_same_request_twice_to_a_worker_counts_it_once() -> None:
    inflight = InflightBlocks()
    inflight.add("a", "w1", [1, 2])
    inflight.add("a", "w1", [1, 2, 3])
    inflight.remove("a", "w1")
    assert inflight.blocks("w1") == 0


def test_the_oldest_requests_are_forgotten_past_the_bound() -> None:
    inflight = InflightBlocks(max_requests=2)
    inflight.add("a", "w1", [1])
    inflight.add("b", "w1", [2])
    inflight.add("c", "w1", [3])
    assert len(inflight) == 2
    assert (inflight.match("w1", [1]), inflight.match("w1", [2]), inflight.match("w1", [3])) == (
        0, 1, 1)
    with pytest.raises(ValueError, match="max_requests"):
        InflightBlocks(max_requests=0)
