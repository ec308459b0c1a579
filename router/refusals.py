"""Requests the admission section refused before routing, kept where the decisions are.

A request refused by admission (a tenant's budget spent: 429; no in-flight slot, or the
router stopping: 503) takes no routing decision, yet it is what an operator looks up when a
client quotes the request id of a 429. ``RefusalRecorder.refused`` keeps one
``RefusalRecord`` in the ``/debug/decisions`` ring (``router.decisions.DecisionLog``, which
bounds the refusals apart from the decisions, so a storm of refusals does not push the
decisions out) and hands it to the refusal sinks (the decision log,
``router.decision_log.DecisionLogWriter``, sampled at a share of its own and throttled per
tenant and reason and in all).

Recording keeps a reference to the record; the ring renders it when read. A record carries
no worker (none was chosen) and names the routing file whose admission section refused the
request by its fingerprint (``policies.reloader.fingerprint_of``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

log = logging.getLogger(__name__)

# the ``kind`` of a refusal's entry and line (a decision's is ``decision``)
REFUSAL_KIND = "refusal"


@dataclass(frozen=True, slots=True)
class RefusalRecord:
    at: float                   # wall-clock unix time
    request_id: str
    trace_id: str | None        # the W3C trace the request came with (router.trace_context)
    tenant: str | None
    model: str                  # as the client asked for it
    path: str
    reason: str                 # kvroute_admission_rejections_total's reason label
    status: int                 # the HTTP status answered (429, 503)
    message: str                # the error message the client got
    routing_sha256: str | None  # the fingerprint of the routing file in force for it


class RefusalSink(Protocol):
    """Sees every admission refusal. Must not block."""

    def on_refusal(self, record: RefusalRecord) -> None: ...


class RefusalRing(Protocol):
    """Where ``/debug/decisions`` keeps refusals (``router.decisions.DecisionLog``)."""

    def refused(self, record: RefusalRecord) -> None: ...


def iso_time(at: float) -> str:
    """A unix time as ``/debug/decisions`` writes it (UTC, to the millisecond)."""
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))
            + f".{int(at % 1 * 1000):03d}Z")


def refusal_entry(record: RefusalRecord) -> dict[str, Any]:
    """A refusal as ``/debug/decisions`` shows it (``worker`` null: none was chosen)."""
    return {
        "time": iso_time(record.at),
        "kind": REFUSAL_KIND,
        "request_id": record.request_id,
        "trace_id": record.trace_id,
        "path": record.path,
        "requested_model": record.model,
        "tenant": record.tenant,
        "worker": None,
        "routing_sha256": record.routing_sha256,
        "reason_code": record.reason,
        "reason": record.message,
        "status": record.status,
    }


def refusal_line(record: RefusalRecord) -> bytes:
    """The decision log's JSON line (with its newline) for one refusal."""
    return orjson.dumps({
        "kind": REFUSAL_KIND,
        "ts": round(record.at, 6),
        "request_id": record.request_id,
        "trace_id": record.trace_id,
        "model": record.model,
        "path": record.path,
        "tenant": record.tenant,
        "worker": None,
        "routing_sha256": record.routing_sha256,
        "reason_code": record.reason,
        "reason": record.message,
        "status": record.status,
    }) + b"\n"


class RefusalRecorder:
    """Keeps each refusal in the ring and hands it to the sinks; a sink that fails is
    logged (the first failure, then one in every 1,000) and the refusal answered all the
    same."""

    __slots__ = ("_failures", "_ring", "_sinks")

    def __init__(self, ring: RefusalRing, sinks: Sequence[RefusalSink] = ()) -> None:
        self._ring = ring
        self._sinks = tuple(sinks)
        self._failures: dict[RefusalSink, int] = {}

    def refused(self, record: RefusalRecord) -> None:
        self._ring.refused(record)
        for sink in self._sinks:
            try:
                sink.on_refusal(record)
            except Exception:      # observability never fails a request (a full disk, ...)
                failures = self._failures[sink] = self._failures.get(sink, 0) + 1
                if failures % 1000 == 1:
                    log.exception("refusal sink %s failed (%d time(s) so far); the refusal "
                                  "is answered", type(sink).__name__, failures)
