"""The infinite-cache prefix ceiling: leading blocks seen before, bounded memory."""

from __future__ import annotations

import dataclasses

import pytest

from policies.base import Decision, RoutingRequest
from router.metrics import RouterMetrics
from router.prefix_ceiling import PrefixCeiling


def _decision() -> Decision:
    return Decision(request_id="r", worker_id="w", model="m", profile="p", rule=None, reason="")


def _request(blocks: list[int], tokens: int) -> RoutingRequest:
    return RoutingRequest(request_id="r", model="m", num_prompt_tokens=tokens,
                          block_hashes={16: blocks, 32: blocks[::2]})


def _counts(metrics: RouterMetrics) -> tuple[float, float]:
    return (metrics.prefix_ceiling_hit_tokens._value.get(),
            metrics.prefix_ceiling_query_tokens._value.get())


def test_leading_blocks_seen_before_are_hits() -> None:
    ceiling = PrefixCeiling(RouterMetrics())
    assert ceiling.observe([1, 2, 3], 16) == 0
    assert ceiling.observe([1, 2, 4, 5], 16) == 2
    assert ceiling.observe([9, 1, 2], 16) == 0          # only a leading run counts
    assert ceiling.observe([1, 2, 4, 5, 6], 16) == 4


def test_decisions_count_tokens_at_the_smallest_block_size_first_attempt_only() -> None:
    metrics = RouterMetrics()
    ceiling = PrefixCeiling(metrics)
    ceiling.on_decision(_request([1, 2, 3], 50), _decision(), 0, 0.0)
    ceiling.on_decision(_request([1, 2, 7], 40), _decision(), 0, 0.0)
    ceiling.on_decision(_request([1, 2, 7], 40), _decision(), 1, 0.0)   # a retry: ignored
    ceiling.on_decision(RoutingRequest(request_id="x", model="m", num_prompt_tokens=9),
                        _decision(), 0, 0.0)                            # no hashes: ignored
    assert _counts(metrics) == (32.0, 90.0)


def test_requests_no_worker_takes_are_not_counted() -> None:
    metrics = RouterMetrics()
    ceiling = PrefixCeiling(metrics)
    unserved = dataclasses.replace(_decision(), worker_id=None)
    ceiling.on_decision(_request([1, 2, 3], 50), unserved, 0, 0.0)
    assert _counts(metrics) == (0.0, 0.0)
    ceiling.on_decision(_request([1, 2, 3], 50), _decision(), 0, 0.0)
    assert _counts(metrics) == (0.0, 50.0)      # its blocks were not remembered either


def test_capacity_forgets_the_first_seen_block() -> None:
    ceiling = PrefixCeiling(RouterMetrics(), capacity=3)
    ceiling.observe([1, 2, 3], 16)
    assert ceiling.observe([1], 16) == 1     # a hit does not refresh it
    ceiling.observe([4], 16)                 # evicts 1
    assert ceiling.observe([2, 3, 4], 16) == 3
    assert ceiling.observe([1], 16) == 0


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity: must be positive"):
        PrefixCeiling(RouterMetrics(), capacity=0)


def test_a_long_stream_of_new_blocks_keeps_the_most_recent_capacity_of_them() -> None:
    """Far past the capacity, exactly the last ``capacity`` first-seen blocks are known, and
    the ones before them are forgotten in the order they were first seen."""
    ceiling = PrefixCeiling(RouterMetrics(), capacity=1000)
    for start in range(0, 50_000, 100):
        assert ceiling.observe(list(range(start, start + 100)), 16) == 0
    assert ceiling.observe(list(range(49_000, 50_000)), 16) == 1000     # all still known
    assert ceiling.observe([48_999], 16) == 0     # forgotten long ago: new again, and it
    assert ceiling.observe([49_000], 16) == 0     # pushed out the oldest known one, 49,000
    assert ceiling.observe([49_002], 16) == 1     # (which pushed out 49,001)
    assert ceiling.observe([49_001], 16) == 0


def test_what_the_ceiling_remembers_is_not_walked_by_the_garbage_collector() -> None:
    """A full collection walks every tracked container's items: the seen hashes sit in an
    untracked dict and their order in an array of raw values, so neither adds to the pause."""
    import gc

    ceiling = PrefixCeiling(RouterMetrics(), capacity=1000)
    for start in range(0, 5000, 100):
        ceiling.observe([(1 << 40) + n for n in range(start, start + 100)], 16)
    gc.collect()
    assert len(ceiling._seen) == 1000
    assert not gc.is_tracked(ceiling._seen)
    assert not [item for item in gc.get_referents(ceiling._order) if isinstance(item, int)]
