"""The loop collector: CPython's rule for which generation is due, collections run from the
event loop's task and not from the allocations in between, thresholds given back on stop."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from router.collector import SAFETY_THRESHOLD, LoopCollector, due_generation


class Node:
    """A container in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture()
def collections() -> Iterator[list[int]]:
    """The generations of the collections that start while the test runs."""
    started: list[int] = []

    def record(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(record)
    thresholds = gc.get_threshold()
    try:
        yield started
    finally:
        gc.callbacks.remove(record)
        gc.set_threshold(*thresholds)


def test_due_generation_follows_cpython_rule() -> None:
    thresholds = (700, 10, 10)
    assert due_generation((700, 10, 10), thresholds) is None      # not over the young one
    assert due_generation((701, 0, 0), thresholds) == 0
    assert due_generation((701, 11, 3), thresholds) == 1
    assert due_generation((701, 11, 11), thresholds) == 2          # the oldest one over
    assert due_generation((701, 0, 11), thresholds) == 2
    assert due_generation((5, 50, 50), thresholds) is None         # only the young count starts


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        LoopCollector(0)


def test_install_moves_the_young_threshold_out_of_the_way_and_gives_it_back(
        collections: list[int]) -> None:
    gc.set_threshold(700, 10, 10)
    collector = LoopCollector()
    collector.install()
    assert gc.get_threshold() == (SAFETY_THRESHOLD, 10, 10)
    assert collector.thresholds == (700, 10, 10) and collector.active
    collector.uninstall()
    assert gc.get_threshold() == (700, 10, 10) and not collector.active


def test_cycles_are_collected_by_the_loop_task_not_by_the_allocations(
        collections: list[int]) -> None:
    gc.set_threshold(700, 10, 10)
    gc.collect()
    inside: list[int] = []

    async def main() -> None:
        collector = LoopCollector(interval_s=0.005)
        collector.start()
        try:
            before = len(collections)
            nodes = [Node() for _ in range(5_000)]       # far past 700 new containers
            probe = weakref.ref(nodes[0])
            inside.extend(collections[before:])          # none started while allocating
            del nodes
            assert probe() is not None                   # a cycle: refcounts do not free it
            for _ in range(200):                         # bounded: at most 2 s
                await asyncio.sleep(0.01)
                if probe() is None:
                    break
            assert probe() is None
            assert sum(collector.collections) >= 1
        finally:
            await collector.stop()
        assert not collector.active

    asyncio.run(main())
    assert inside == []
    assert gc.get_threshold() == (700, 10, 10)


def test_a_disabled_collector_stays_disabled(collections: list[int]) -> None:
    gc.set_threshold(700, 10, 10)

    async def main() -> int:
        collector = LoopCollector(interval_s=0.002)
        collector.start()
        gc.disable()
        try:
            before = len(collections)
            kept = [Node() for _ in range(5_000)]
            await asyncio.sleep(0.05)
            ran = len(collections) - before
            del kept
            return ran
        finally:
            gc.enable()
            await collector.stop()

    assert asyncio.run(main()) == 0


def test_the_interval_backs_off_while_idle_and_returns_when_busy() -> None:
    collector = LoopCollector(interval_s=0.01)
    collector.thresholds = (700, 10, 10)
    waits = [0.01]
    for _ in range(10):                                   # nothing allocated
        waits.append(collector.next_interval(waits[-1], 0))
    assert waits[:4] == [0.01, 0.02, 0.04, 0.08]
    assert waits[-1] == 1.0                               # capped at the idle interval
    assert collector.next_interval(1.0, 69) == 1.0        # under a tenth of 700
    assert collector.next_interval(1.0, 70) == 0.01       # busy again: the fast interval
    slow = LoopCollector(interval_s=2.0)
    assert slow.next_interval(2.0, 0) == 2.0              # never below its own interval
