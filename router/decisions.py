"""A bounded ring of recent routing decisions, rendered for ``GET /debug/decisions``.

Recording keeps references only (the decision is immutable); the JSON is built when
someone asks, so the request path pays one ``deque.append``. When the attempt a decision sent
ends, its outcome (status, times, tokens) is kept beside it (``ended``): how a request ended,
and how long it took, is read where why it went there is. The requests admission refused
before routing (``router.refusals``) are kept beside the decisions, in a ring of the same
size of their own (a storm of 429s does not push the decisions out), and read with them,
newest first. A read's ``limit`` counts each kind apart: the newest ``limit`` decisions and
the newest ``limit`` refusals (during a storm of refusals the newest entries are all
refusals, and a limit counted across both hid every decision); ``kind`` reads one alone.
"""

from __future__ import annotations

import heapq
import itertools
import math
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from policies.base import Decision
from router.refusals import REFUSAL_KIND, RefusalRecord, iso_time, refusal_entry

_WORD = re.compile(r"[^a-z0-9_-]+")

# the ``kind`` of a decision's entry (a refusal's is ``refusal``)
DECISION_KIND = "decision"
# what ``DecisionLog.render`` can be narrowed to (``/debug/decisions?kind=``)
ENTRY_KINDS = (DECISION_KIND, REFUSAL_KIND)
# how an attempt ended, as /debug/decisions shows it
Outcome = dict[str, Any]
# an entry as /debug/decisions shows it
Rendered = dict[str, Any]


def reason_code(decision: Decision) -> str:
    """The deciding term as a short metric label (never the free text)."""
    decided_by = decision.attributes.get("decided_by")
    if isinstance(decided_by, str) and decided_by:
        return _WORD.sub("-", decided_by.lower())[:40]
    return "no-candidate" if decision.worker_id is None else "unknown"


class DecisionRecord(NamedTuple):
    """A decision as taken (immutable; a named tuple: built on every request's path, and
    quicker to build than a frozen dataclass, which sets each field through
    ``object.__setattr__``)."""

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
    # the classifier's best class, whose probability the confidence is (unsure: not the class)
    semantic_predicted: str | None = None
    trace_id: str | None = None   # the W3C trace the request came with (router.trace_context)
    # the fingerprint of the routing file whose policy decided (policies.reloader)
    routing_sha256: str | None = None


class DecisionEntry:
    """A decision kept: its record, its rendering once read (None: not yet, or its outcome
    changed since) and its attempt's outcome (None while it runs, or when it sent none)."""

    __slots__ = ("outcome", "record", "rendered")

    def __init__(self, record: DecisionRecord) -> None:
        self.record = record
        self.rendered: Rendered | None = None
        self.outcome: Outcome | None = None


class RefusalEntry:
    """A refusal kept: its record and its rendering once read."""

    __slots__ = ("record", "rendered")

    def __init__(self, record: RefusalRecord) -> None:
        self.record = record
        self.rendered: Rendered | None = None


class DecisionLog:
    """The last ``size`` decisions and the last ``size`` refusals. Each is rendered the first
    time it is read and kept so: at 40 workers the whole ring took 50 ms to render, on the
    event loop, at every read, and a client polling ``/debug/decisions`` slowed every
    request of the router."""

    __slots__ = ("_refusals", "_ring")

    def __init__(self, size: int) -> None:
        self._ring: deque[DecisionEntry] = deque(maxlen=size)
        self._refusals: deque[RefusalEntry] = deque(maxlen=size)

    def record(self, record: DecisionRecord) -> DecisionEntry:
        """Keep ``record``; its entry, for ``ended``."""
        entry = DecisionEntry(record)
        self._ring.append(entry)
        return entry

    def refused(self, record: RefusalRecord) -> None:
        """Keep a request admission refused (``router.refusals.RefusalRecorder``)."""
        self._refusals.append(RefusalEntry(record))

    @staticmethod
    def ended(entry: DecisionEntry, outcome: Outcome) -> None:
        """The attempt of ``entry``'s decision ended so (rendered anew at the next read)."""
        entry.rendered, entry.outcome = None, outcome

    def __len__(self) -> int:
        return len(self._ring) + len(self._refusals)

    def render(self, limit: int | None = None, kind: str | None = None,
               where: Callable[[Rendered], bool] | None = None) -> list[Rendered]:
        """Decisions and refusals, newest first: of each kind (``kind`` None: both; else
        ``decision`` or ``refusal`` alone), the newest ``limit`` (None: all) of those ``where``
        keeps (None: all). ``limit`` counts each kind apart, so a storm of refusals does not
        hide the decisions: up to ``2 * limit`` entries when both are read. The same dicts
        are answered at every read of one: do not change them."""
        if kind is not None and kind not in ENTRY_KINDS:
            raise ValueError(f"kind: not one of {', '.join(ENTRY_KINDS)}: {kind!r}")
        decisions = refusals = None
        if kind != REFUSAL_KIND:
            decisions = _newest(self._decisions(), where, limit)
        if kind != DECISION_KIND:
            refusals = _newest(self._refused(), where, limit)
        if decisions is None or refusals is None:
            return [rendered for _, rendered in (decisions or refusals or ())]
        return [rendered for _, rendered in heapq.merge(
            decisions, refusals, key=lambda pair: pair[0], reverse=True)]

    def _decisions(self) -> Iterator[tuple[float, Rendered]]:
        """The decisions kept, newest first, with their times."""
        for entry in reversed(self._ring):
            if entry.rendered is None:
                entry.rendered = _render(entry.record, entry.outcome)
            yield entry.record.at, entry.rendered

    def _refused(self) -> Iterator[tuple[float, Rendered]]:
        """The refusals kept, newest first, with their times."""
        for entry in reversed(self._refusals):
            if entry.rendered is None:
                entry.rendered = refusal_entry(entry.record)
            yield entry.record.at, entry.rendered


def _newest(entries: Iterable[tuple[float, Rendered]], where: Callable[[Rendered], bool] | None,
            limit: int | None) -> list[tuple[float, Rendered]]:
    """The first ``limit`` of ``entries`` that ``where`` keeps (rendering no more)."""
    if where is not None:
        entries = (pair for pair in entries if where(pair[1]))
    return list(itertools.islice(entries, limit))


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
        "semantic_predicted": record.semantic_predicted,
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
