"""Structured decision log: one JSON line per sampled routing decision, for log pipelines.

Configured from the environment of the router process:

* ``KVROUTE_DECISION_LOG``: where lines go: a file path (appended to, and reopened when it
  is renamed or removed, as logrotate does: ``router.followed_file``) or ``-`` for stdout;
  unset or empty: no log.
* ``KVROUTE_DECISION_LOG_SAMPLE``: share of requests logged, 0..1 (default 1). Sampling is by
  request id, so every attempt of a sampled request is logged and the same request is
  sampled the same way on every router replica.

Each decision's line: ``kind`` (``decision``), ``ts`` (unix seconds), ``request_id``,
``trace_id`` (the W3C trace the request came with, else null: ``router.trace_context``),
``attempt``, ``model``, ``profile``, ``rule``, ``routing_sha256`` (the fingerprint of the
routing file whose policy decided: ``policies.reloader.fingerprint_of``), ``worker`` (null:
no candidate), ``reason_code``, ``reason``, ``class``, ``tenant``, ``prompt_tokens``,
``decision_us``, ``candidates`` (worker, total, per-scorer scores, best first),
``filtered_out`` and the decision's numeric ``attributes``. A request the admission section
refused before routing has a line of its own, ``kind`` ``refusal``
(``router.refusals.refusal_line``), sampled alike.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from policies.base import Decision, RoutingRequest
from router.decisions import DECISION_KIND, reason_code
from router.refusals import RefusalRecord, refusal_line
from router.trace_context import request_trace_id

ENV_PATH = "KVROUTE_DECISION_LOG"
ENV_SAMPLE = "KVROUTE_DECISION_LOG_SAMPLE"


class DecisionLogConfigError(ValueError):
    """A decision-log setting is invalid; the message names the variable."""


@dataclass(frozen=True, slots=True)
class DecisionLogConfig:
    path: str | None = None      # None: off; "-": stdout
    sample_rate: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.sample_rate <= 1.0:
            raise DecisionLogConfigError(f"{ENV_SAMPLE}: must be between 0 and 1, "
                                         f"got {self.sample_rate!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> DecisionLogConfig:
        raw = env.get(ENV_SAMPLE, "").strip()
        try:
            rate = float(raw) if raw else 1.0
        except ValueError:
            raise DecisionLogConfigError(f"{ENV_SAMPLE}: must be a number between 0 and 1, "
                                         f"got {raw!r}") from None
        return cls(path=env.get(ENV_PATH, "").strip() or None, sample_rate=rate)


def sampled(request_id: str, rate: float) -> bool:
    """Deterministic by request id: ``crc32(id)`` below ``rate`` of the 32-bit range."""
    if rate >= 1.0:
        return True
    return zlib.crc32(request_id.encode()) < rate * 4294967296.0


def _number(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 9) if math.isfinite(value) else None
    return value


def _attribute(value: Any) -> Any:
    """A decision attribute as the line keeps it: numbers rounded, a tuple of scalars (the
    plugins skipped) as a list."""
    if isinstance(value, tuple):
        return [_number(item) for item in value if isinstance(item, (int, float, str, bool))]
    return _number(value)


def class_confidence(request: RoutingRequest) -> float | None:
    """How sure the semantic producer was of the request's class (None: not classified)."""
    value = request.attributes.get("semantic_confidence")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def class_outcome(request: RoutingRequest) -> str | None:
    """How the class was found (``classified``, or why the default class stood in)."""
    value = request.attributes.get("semantic_outcome")
    return value if isinstance(value, str) else None


def decision_line(request: RoutingRequest, decision: Decision, attempt: int, seconds: float,
                  at: float, routing_sha256: str | None = None) -> bytes:
    """The JSON line (with its newline) for one decision (``routing_sha256``: the
    fingerprint of the routing file whose policy took it)."""
    ranked = sorted(decision.candidates, key=lambda c: c.total, reverse=True)
    record = {
        "kind": DECISION_KIND,
        "ts": round(at, 6),
        "request_id": decision.request_id,
        "trace_id": request_trace_id(request.headers),
        "attempt": attempt,
        "model": decision.model,
        "profile": decision.profile,
        "rule": decision.rule,
        "routing_sha256": routing_sha256,
        "worker": decision.worker_id,
        "reason_code": reason_code(decision),
        "reason": decision.reason,
        "class": request.semantic_class,
        "class_confidence": _number(class_confidence(request)),
        "class_outcome": class_outcome(request),
        "tenant": request.tenant,
        "prompt_tokens": request.num_prompt_tokens,
        "decision_us": round(seconds * 1e6, 1),
        "candidates": [{"worker": c.worker_id, "total": _number(c.total),
                        "scores": {k: _number(v) for k, v in c.scores.items()}}
                       for c in ranked],
        "filtered_out": dict(decision.filtered_out),
        "attributes": {k: _attribute(v) for k, v in decision.attributes.items()
                       if isinstance(v, (int, float, str, bool, tuple)) or v is None},
    }
    return orjson.dumps(record) + b"\n"


class LineStream(Protocol):
    """Where lines go: a text stream (stdout) or a ``router.followed_file.FollowedFile``."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


class DecisionLogWriter:
    """A decision sink and a refusal sink writing sampled lines to a text stream it does not
    own."""

    __slots__ = ("_clock", "_rate", "_stream")

    def __init__(self, stream: LineStream, sample_rate: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._stream = stream
        self._rate = sample_rate
        self._clock = clock

    def on_decision(self, request: RoutingRequest, decision: Decision, attempt: int,
                    seconds: float, routing_sha256: str | None = None) -> None:
        if not sampled(decision.request_id, self._rate):
            return
        self._write(decision_line(request, decision, attempt, seconds, self._clock(),
                                  routing_sha256))

    def on_refusal(self, record: RefusalRecord) -> None:
        """A request refused before routing: a line too, sampled by its id as a decision's
        (a storm of refusals is thinned as the decisions are)."""
        if sampled(record.request_id, self._rate):
            self._write(refusal_line(record))

    def _write(self, line: bytes) -> None:
        self._stream.write(line.decode())
        self._stream.flush()
