"""policies/producers/runner.py: inline vs thread, failures skipped."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from policies.base import RoutingRequest
from policies.producers.runner import produce, run_producers, run_producers_sync
from workers.models import WorkerView


class _Marker:
    def __init__(self, name: str, offload: bool) -> None:
        self.name = name
        self.offload = offload

    def should_offload(self, request: RoutingRequest) -> bool:
        return self.offload

    def produce(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> None:
        request.attributes[self.name] = threading.current_thread() is threading.main_thread()


class _Broken:
    name = "broken"

    def produce(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> None:
        raise RuntimeError("producer bug")


async def test_offloaded_producers_run_in_a_thread_and_failures_are_skipped() -> None:
    request = RoutingRequest("r", "m")
    failed = await run_producers([_Marker("inline", False), _Broken(), _Marker("heavy", True)],
                                 request, [])
    assert failed == ["broken"]
    assert request.attributes == {"inline": True, "heavy": False, "producers.failed": ("broken",)}


def test_sync_runner_runs_all_inline() -> None:
    request = RoutingRequest("r", "m")
    assert run_producers_sync([_Broken(), _Marker("heavy", True)], request, []) == ["broken"]
    assert request.attributes == {"heavy": True, "producers.failed": ("broken",)}


class _NoHint:
    name = "no-hint"
    should_offload = None      # not an OffloadHint: runs inline

    def produce(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> None:
        request.attributes[self.name] = threading.current_thread() is threading.main_thread()


async def test_produce_counts_the_producers_run_off_the_loop() -> None:
    request = RoutingRequest("r", "m")
    inline = await produce([_Marker("inline", False), _NoHint(), _Broken()], request, [])
    assert (inline.failed, inline.offloaded) == (["broken"], 0)
    assert request.attributes == {"inline": True, "no-hint": True,
                                  "producers.failed": ("broken",)}
    mixed = await produce([_Marker("heavy", True), _Marker("light", False)], request, [])
    assert (mixed.failed, mixed.offloaded) == ([], 1)
    assert request.attributes["heavy"] is False


class _AsyncMarker(_Marker):
    async def produce_async(self, request: RoutingRequest,
                            workers: Sequence[WorkerView]) -> None:
        request.attributes[self.name + ".async"] = (
            threading.current_thread() is threading.main_thread())


async def test_a_producer_with_produce_async_is_awaited_on_the_loop_not_in_a_thread() -> None:
    # the semantic producer: a pool thread held per waiting request made the pool the queue
    request = RoutingRequest("r", "m")
    result = await produce([_AsyncMarker("model", True), _AsyncMarker("cached", False)],
                           request, [])
    assert (result.failed, result.offloaded) == ([], 1)
    assert request.attributes == {"model.async": True, "cached": True}
