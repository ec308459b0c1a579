"""Run a request's producers before the decision: inline, or in a thread when heavy.

A producer that exposes ``should_offload(request) -> bool`` (see ``OffloadHint``; the tokens
producer does, by text length) runs in ``executor`` (the loop's default thread pool when
None) when it says so, or, when it also has ``produce_async`` (the semantic producer),
is awaited on the loop: it waits for its own worker (the embedding thread) without holding
a pool thread; the others run inline. A producer that raises is logged and skipped:
the decision then runs on whatever the request already carries. Returns the names of the
producers that failed, for the caller's logs or metrics; ``produce`` also says how many ran
off the loop (when none did, nothing else ran meanwhile and the caller's views still hold).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from policies.base import Producer, RoutingRequest
from policies.failure_log import PluginFailureLog
from workers.models import WorkerView

log = logging.getLogger(__name__)


@runtime_checkable
class OffloadHint(Protocol):
    def should_offload(self, request: RoutingRequest) -> bool: ...


def wants_offload(producer: Producer, request: RoutingRequest) -> bool:
    # ``isinstance(producer, OffloadHint)`` checks exactly this (a non-None attribute), but a
    # runtime-protocol check costs microseconds on every request
    should_offload = getattr(producer, "should_offload", None)
    if should_offload is None:
        return False
    try:
        return bool(should_offload(request))
    except Exception:
        log.exception("should_offload of producer %s failed; running inline", producer.name)
        return False


@dataclass(slots=True)
class ProduceResult:
    failed: list[str] = field(default_factory=list)   # names of the producers that raised
    offloaded: int = 0                                # producers run in the executor


# the request attribute naming the producers that raised on it (the decision's
# ``skipped_plugins`` lists them with the filters, scorers and picker that failed)
FAILED_PRODUCERS = "producers.failed"


async def produce(producers: Sequence[Producer], request: RoutingRequest,
                  workers: Sequence[WorkerView], executor: Executor | None = None,
                  failures: PluginFailureLog | None = None) -> ProduceResult:
    """``failures``: how a failure is logged (None: each with its traceback)."""
    result = ProduceResult()
    loop: asyncio.AbstractEventLoop | None = None
    for producer in producers:
        try:
            if wants_offload(producer, request):
                result.offloaded += 1
                produce_async = getattr(producer, "produce_async", None)
                if produce_async is not None:
                    # awaits its model without holding a thread: a pool thread held per
                    # waiting request made the pool (min(32, cores + 4) threads) the queue,
                    # unbounded and outside the producer's own timeout and queue bound
                    await produce_async(request, workers)
                else:
                    loop = loop or asyncio.get_running_loop()
                    await loop.run_in_executor(executor, producer.produce, request, workers)
            else:
                producer.produce(request, workers)
        except (Exception, SystemExit):
            if failures is None:
                log.exception("producer %s failed on request %s; skipped", producer.name,
                              request.request_id)
            else:
                failures.failed(producer.name, "producer %s failed on request %s; skipped",
                                producer.name, request.request_id)
            result.failed.append(producer.name)
    if result.failed:
        request.attributes[FAILED_PRODUCERS] = tuple(result.failed)
    return result


async def run_producers(producers: Sequence[Producer], request: RoutingRequest,
                        workers: Sequence[WorkerView],
                        executor: Executor | None = None) -> list[str]:
    return (await produce(producers, request, workers, executor)).failed


def run_producers_sync(producers: Sequence[Producer], request: RoutingRequest,
                       workers: Sequence[WorkerView]) -> list[str]:
    """The same, all inline (the simulator's virtual time has no event loop to protect)."""
    failed: list[str] = []
    for producer in producers:
        try:
            producer.produce(request, workers)
        except (Exception, SystemExit):
            log.exception("producer %s failed on request %s; skipped", producer.name,
                          request.request_id)
            failed.append(producer.name)
    if failed:
        request.attributes[FAILED_PRODUCERS] = tuple(failed)
    return failed
