"""Lazy per-worker decision attributes."""

from __future__ import annotations

from policies.base import CycleState
from policies.cycle_keys import worker_attributes
from policies.latency.attributes import LazyAttribute, record_attribute


def test_chosen_workers_value_is_read_on_demand() -> None:
    cycle = CycleState()
    members = {"a": 1, "b": 2}
    record_attribute(cycle, "estimated_ttft_s", LazyAttribute(members, lambda w: members[w] / 10))
    assert worker_attributes(cycle, "b") == {"estimated_ttft_s": 0.2}
    assert worker_attributes(cycle, "z") == {}
    assert sorted(LazyAttribute(members, str)) == ["a", "b"]
