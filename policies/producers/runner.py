"""Run a request's producers before the decision: inline, or in a thread when heavy.

A producer that exposes ``should_offload(request) -> bool`` (see ``OffloadHint``; the tokens
producer does, by text length) runs in ``executor`` (the loop's default thread pool when
None) when it says so; the others run inline. A producer that raises is logged and skipped:
the decision then runs on whatever the request already carries. Returns the names of the
producers that failed, for the caller's logs or metrics.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Protocol, runtime_checkable

from policies.base import Producer, RoutingRequest
from workers.models import WorkerView

log = logging.getLogger(__name__)


@runtime_checkable
class OffloadHint(Protocol):
    def should_offload(self, request: RoutingRequest) -> bool: ...


def wants_offload(producer: Producer, request: RoutingRequest) -> bool:
    try:
        return isinstance(producer, OffloadHint) and bool(producer.should_offload(request))
    except Exception:
        log.exception("should_offload of producer %s failed; running inline", producer.name)
        return False


async def run_producers(producers: Sequence[Producer], request: RoutingRequest,
                        workers: Sequence[WorkerView],
                        executor: Executor | None = None) -> list[str]:
    loop = asyncio.get_running_loop()
    failed: list[str] = []
    for producer in producers:
        try:
            if wants_offload(producer, request):
                await loop.run_in_executor(executor, producer.produce, request, workers)
            else:
                producer.produce(request, workers)
        except Exception:
            log.exception("producer %s failed on request %s; skipped", producer.name,
                          request.request_id)
            failed.append(producer.name)
    return failed


def run_producers_sync(producers: Sequence[Producer], request: RoutingRequest,
                       workers: Sequence[WorkerView]) -> list[str]:
    """The same, all inline (the simulator's virtual time has no event loop to protect)."""
    failed: list[str] = []
    for producer in producers:
        try:
            producer.produce(request, workers)
        except Exception:
            log.exception("producer %s failed on request %s; skipped", producer.name,
                          request.request_id)
            failed.append(producer.name)
    return failed
