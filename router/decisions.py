"""A bounded ring of recent routing decisions, rendered for ``GET /debug/decisions``.

Recording keeps references only (the decision is immutable); the JSON is built when
someone asks, so the request path pays one ``deque.append``. When the attempt a decision sent
ends, its outcome (status, times, tokens) is kept beside it (``ended``): how a request ended,
and how long it took, is read where why it went there is. The requests admission refused
before routing (``router.refusals``) are kept beside the decisions, in a ring of the same
size of their own (a storm of 429s does not push the decisions out), and read with them,
newest first.
"""

from __future__ import annotations

import heapq
import itertools
import math
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from policies.base import Decision
from router.refusals import RefusalRecord, iso_time, refusal_entry

_WORD = re.compile(r"[^a-z0-9_-]+")

# a decision kept: [its record, its rendering or None, its attempt's outcome or None]
DecisionEntry = list[Any]
# a refusal kept: [its record, its rendering or None]
RefusalEntry = list[Any]
# the ``kind`` of a decision's entry (a refusal's is ``refusal``)
DECISION_KIND = "decision"
# how an attempt ended, as /debug/decisions shows it
Outcome = dict[str, Any]


def reason_code(decision: Decision) -> str:
    """The deciding term as a short metric label (never the free text)."""
    decided_by = decision.attributes.get("decided_by")
    if isinstance(decided_by, str) and decided_by:
        return _WORD.sub("-", decided_by.lower())[:40]
    return "no-candidate" if decision.worker_id is None else "unknown"


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    at: float                 # wall-clock unix time
    decision: Decision
    requested_model: str
    path: str
    attempt: int
    duration_s: float
    num_prompt_tokens: int
    semantic_class: str | None
    # how the class was found (the semantic producer's: its confidence, and its outcome,
    # e.g. ``unsure`` or ``timeout`` when the default class stood in); None without one
    semantic_confidence: float | None = None
    semantic_outcome: str | None = None
    trace_id: str | None = None   # the W3C trace the request came with (router.trace_context)
    # the fingerprint of the routing file whose policy decided (policies.reloader)
    routing_sha256: str | None = None


class DecisionLog:
    """The last ``size`` decisions and the last ``size`` refusals. Each is rendered the first
    time it is read and kept so: at 40 workers the whole ring took 50 ms to render, on the
    event loop, at every read, and a client polling ``/debug/decisions`` slowed every
    request of the router."""

    __slots__ = ("_refusals", "_ring")

    def __init__(self, size: int) -> None:
        # [record, its rendering or None, its outcome or None]
        self._ring: deque[DecisionEntry] = deque(maxlen=size)
        # [record, its rendering or None]
        self._refusals: deque[RefusalEntry] = deque(maxlen=size)

    def record(self, record: DecisionRecord) -> DecisionEntry:
        """Keep ``record``; its entry, for ``ended``."""
        entry = [record, None, None]
        self._ring.append(entry)
        return entry

    def refused(self, record: RefusalRecord) -> None:
        """Keep a request admission refused (``router.refusals.RefusalRecorder``)."""
        self._refusals.append([record, None])

    @staticmethod
    def ended(entry: DecisionEntry, outcome: Outcome) -> None:
        """The attempt of ``entry``'s decision ended so (rendered anew at the next read)."""
        entry[1], entry[2] = None, outcome

    def __len__(self) -> int:
        return len(self._ring) + len(self._refusals)

    def render(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Decisions and refusals, newest first (the same dicts at every read of one: do not
        change them)."""
        newest: Any = reversed(self._ring)
        if self._refusals:
            newest = heapq.merge(newest, reversed(self._refusals),
                                 key=lambda entry: entry[0].at, reverse=True)
        rendered = []
        for entry in itertools.islice(newest, limit):
            if entry[1] is None:
                entry[1] = (refusal_entry(entry[0]) if isinstance(entry[0], RefusalRecord)
                            else _render(entry[0], entry[2]))
            rendered.append(entry[1])
        return rendered


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):        # e.g. skipped_plugins: a JSON list
        return [_json_value(item) for item in value]
    return str(value)


def _render(record: DecisionRecord, outcome: Outcome | None) -> dict[str, Any]:
    d = record.decision
    return {
        "time": iso_time(record.at),
        "kind": DECISION_KIND,
        "request_id": d.request_id,
        "trace_id": record.trace_id,
        "path": record.path,
        "requested_model": record.requested_model,
        "model": d.model,
        "attempt": record.attempt,
        "worker": d.worker_id,
        "profile": d.profile,
        "rule": d.rule,
        "routing_sha256": record.routing_sha256,
        "reason": d.reason,
        "reason_code": reason_code(d),
        "semantic_class": record.semantic_class,
        "semantic_confidence": _json_value(record.semantic_confidence),
        "semantic_outcome": record.semantic_outcome,
        "num_prompt_tokens": record.num_prompt_tokens,
        "decision_us": round(record.duration_s * 1e6, 1),
        "candidates": [{"worker": c.worker_id, "total": round(c.total, 6),
                        "scores": {k: round(v, 6) for k, v in c.scores.items()}}
                       for c in d.candidates],
        "filtered_out": dict(d.filtered_out),
        "attributes": {k: _json_value(v) for k, v in d.attributes.items()},
        # how its attempt ended (null while it runs, or for a decision that sent none)
        "outcome": outcome,
    }
