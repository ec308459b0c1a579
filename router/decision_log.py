"""Structured decision log: one JSON line per sampled routing decision, for log pipelines.

Configured from the environment of the router process:

* ``KVROUTE_DECISION_LOG``: where lines go: a file path (appended to, and reopened when it
  is renamed or removed, as logrotate does: ``router.followed_file``) or ``-`` for stdout;
  unset or empty: no log.
* ``KVROUTE_DECISION_LOG_SAMPLE``: share of requests logged, 0..1 (default 1). Sampling is by
  request id, so every attempt of a sampled request is logged and the same request is
  sampled the same way on every router replica.
* ``KVROUTE_DECISION_LOG_REFUSAL_SAMPLE``: share of admission refusals logged, 0..1 (default:
  the decisions' share). Drawn at each refusal, not by request id: a client retrying under
  one id after a 429 would otherwise have every retry logged, or none.
* ``KVROUTE_DECISION_LOG_REFUSALS_PER_SECOND``: at most this many refusal lines a second for
  one (tenant, reason) (default 10); the others of that second are counted and written as
  one line of ``kind`` ``refusals_suppressed`` (``RefusalThrottle``), so a storm of 429s
  writes a bounded log.

Each decision's line: ``kind`` (``decision``), ``ts`` (unix seconds), ``request_id``,
``trace_id`` (the W3C trace the request came with, else null: ``router.trace_context``),
``attempt``, ``model``, ``profile``, ``rule``, ``routing_sha256`` (the fingerprint of the
routing file whose policy decided: ``policies.reloader.fingerprint_of``), ``worker`` (null:
no candidate), ``reason_code``, ``reason``, ``class``, ``tenant``, ``prompt_tokens``,
``decision_us``, ``candidates`` (worker, total, per-scorer scores, best first),
``filtered_out`` and the decision's numeric ``attributes``. A request the admission section
refused before routing has a line of its own, ``kind`` ``refusal``
(``router.refusals.refusal_line``), sampled and throttled as above; a second's refusals
throttled are ``kind`` ``refusals_suppressed``: ``ts`` (the start of that second),
``tenant``, ``reason_code``, ``suppressed`` (how many) and ``limit`` (the lines written).
"""

from __future__ import annotations

import math
import random
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, overload

import orjson

from policies.base import Decision, RoutingRequest
from router.decisions import DECISION_KIND, reason_code
from router.label_values import OTHER
from router.refusals import RefusalRecord, refusal_line
from router.trace_context import request_trace_id

ENV_PATH = "KVROUTE_DECISION_LOG"
ENV_SAMPLE = "KVROUTE_DECISION_LOG_SAMPLE"
ENV_REFUSAL_SAMPLE = "KVROUTE_DECISION_LOG_REFUSAL_SAMPLE"
ENV_REFUSALS_PER_SECOND = "KVROUTE_DECISION_LOG_REFUSALS_PER_SECOND"
# refusal lines a second for one (tenant, reason), unless set
DEFAULT_REFUSALS_PER_SECOND = 10
# (tenant, reason) pairs throttled apart within one second; later tenants share OTHER's
MAX_THROTTLED_KEYS = 1024
# the ``kind`` of the line counting one second's throttled refusals of a (tenant, reason)
SUPPRESSED_KIND = "refusals_suppressed"


class DecisionLogConfigError(ValueError):
    """A decision-log setting is invalid; the message names the variable."""


@dataclass(frozen=True, slots=True)
class DecisionLogConfig:
    path: str | None = None      # None: off; "-": stdout
    sample_rate: float = 1.0
    refusal_sample_rate: float | None = None     # None: ``sample_rate``
    refusals_per_second: int = DEFAULT_REFUSALS_PER_SECOND

    def __post_init__(self) -> None:
        for name, rate in ((ENV_SAMPLE, self.sample_rate),
                           (ENV_REFUSAL_SAMPLE, self.refusal_sample_rate)):
            if rate is not None and not 0.0 <= rate <= 1.0:
                raise DecisionLogConfigError(f"{name}: must be between 0 and 1, got {rate!r}")
        if self.refusals_per_second < 1:
            raise DecisionLogConfigError(f"{ENV_REFUSALS_PER_SECOND}: must be 1 or more, "
                                         f"got {self.refusals_per_second!r}")

    @property
    def refusal_rate(self) -> float:
        """The share of refusals logged."""
        return self.sample_rate if self.refusal_sample_rate is None else self.refusal_sample_rate

    @property
    def writes(self) -> bool:
        """Whether a log is opened: a path, and some decisions or refusals to write there."""
        return self.path is not None and (self.sample_rate > 0 or self.refusal_rate > 0)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> DecisionLogConfig:
        raw_lines = env.get(ENV_REFUSALS_PER_SECOND, "").strip()
        if raw_lines and not (raw_lines.isascii() and raw_lines.isdigit()):
            raise DecisionLogConfigError(f"{ENV_REFUSALS_PER_SECOND}: must be a whole number "
                                         f"of 1 or more, got {raw_lines!r}")
        return cls(path=env.get(ENV_PATH, "").strip() or None,
                   sample_rate=_rate(env, ENV_SAMPLE, 1.0),
                   refusal_sample_rate=_rate(env, ENV_REFUSAL_SAMPLE),
                   # past 18 digits (int() refuses past 4,300) it is more than any rate
                   refusals_per_second=(DEFAULT_REFUSALS_PER_SECOND if not raw_lines
                                        else int(raw_lines) if len(raw_lines) <= 18
                                        else 10**18))


@overload
def _rate(env: Mapping[str, str], name: str, default: float) -> float: ...


@overload
def _rate(env: Mapping[str, str], name: str, default: None = None) -> float | None: ...


def _rate(env: Mapping[str, str], name: str, default: float | None = None) -> float | None:
    """The share ``name`` sets, else ``default``."""
    raw = env.get(name, "").strip()
    try:
        return float(raw) if raw else default
    except ValueError:
        raise DecisionLogConfigError(f"{name}: must be a number between 0 and 1, "
                                     f"got {raw!r}") from None


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


class RefusalThrottle:
    """At most ``per_second`` refusals of one (tenant, reason) in one second of the wall
    clock; those past it are counted. Bounded: ``max_keys`` pairs are told apart within a
    second, the tenants past them counted together as ``OTHER`` (one pair per reason), and
    the counts are dropped when the second ends."""

    __slots__ = ("_counts", "_max_keys", "_per_second", "second", "suppressing")

    def __init__(self, per_second: int, max_keys: int = MAX_THROTTLED_KEYS) -> None:
        self._per_second = per_second
        self._max_keys = max_keys
        # (tenant, reason) -> [refusals let through, refusals suppressed] in ``second``
        self._counts: dict[tuple[str | None, str], list[int]] = {}
        self.second = 0                # the second counted (int(unix time))
        self.suppressing = False       # whether a refusal of ``second`` was suppressed

    def allow(self, tenant: str | None, reason: str) -> bool:
        """Whether a refusal of ``second`` is written (else it is counted)."""
        counts = self._counts.get((tenant, reason))
        if counts is None:
            key = (tenant, reason) if len(self._counts) < self._max_keys else (OTHER, reason)
            counts = self._counts.setdefault(key, [0, 0])
        if counts[0] < self._per_second:
            counts[0] += 1
            return True
        counts[1] += 1
        self.suppressing = True
        return False

    def turn(self, second: int) -> list[bytes]:
        """Start counting ``second``: the lines of the refusals suppressed in the one that
        ended (``refusals_suppressed``)."""
        lines = [orjson.dumps({"kind": SUPPRESSED_KIND, "ts": self.second, "tenant": tenant,
                               "reason_code": reason, "suppressed": counts[1],
                               "limit": self._per_second}) + b"\n"
                 for (tenant, reason), counts in self._counts.items() if counts[1]
                 ] if self.suppressing else []
        self._counts.clear()
        self.second, self.suppressing = second, False
        return lines


class DecisionLogWriter:
    """A decision sink and a refusal sink writing sampled lines to a text stream it does not
    own. Refusals are sampled at ``refusal_rate`` (default ``sample_rate``), each by a draw,
    and throttled per (tenant, reason) (``RefusalThrottle``); the count of a second's
    throttled refusals is written with the first refusal or sampled decision of a later
    second, or at ``close``."""

    __slots__ = ("_clock", "_draw", "_rate", "_refusal_rate", "_stream", "_throttle")

    def __init__(self, stream: LineStream, sample_rate: float = 1.0,
                 clock: Callable[[], float] = time.time, *,
                 refusal_rate: float | None = None,
                 refusals_per_second: int = DEFAULT_REFUSALS_PER_SECOND,
                 draw: Callable[[], float] = random.random) -> None:
        self._stream = stream
        self._rate = sample_rate
        self._refusal_rate = sample_rate if refusal_rate is None else refusal_rate
        self._clock = clock
        self._draw = draw
        self._throttle = RefusalThrottle(refusals_per_second)

    @classmethod
    def configured(cls, stream: LineStream, config: DecisionLogConfig) -> DecisionLogWriter:
        """A writer as ``config`` says."""
        return cls(stream, config.sample_rate, refusal_rate=config.refusal_rate,
                   refusals_per_second=config.refusals_per_second)

    def on_decision(self, request: RoutingRequest, decision: Decision, attempt: int,
                    seconds: float, routing_sha256: str | None = None) -> None:
        if not sampled(decision.request_id, self._rate):
            return
        at = self._clock()
        if self._throttle.suppressing and int(at) != self._throttle.second:
            self._turn(int(at))
        self._write(decision_line(request, decision, attempt, seconds, at, routing_sha256))

    def on_refusal(self, record: RefusalRecord) -> None:
        """A request refused before routing: a line too, if drawn at the refusals' rate and
        its (tenant, reason) has not had its lines this second."""
        if self._refusal_rate < 1.0 and self._draw() >= self._refusal_rate:
            return
        throttle = self._throttle
        second = int(record.at)
        if second != throttle.second:
            self._turn(second)
        if throttle.allow(record.tenant, record.reason):
            self._write(refusal_line(record))

    def close(self) -> None:
        """Write the count of the refusals throttled in the second under way (the stream
        is not closed)."""
        if self._throttle.suppressing:
            self._turn(self._throttle.second)

    def _turn(self, second: int) -> None:
        lines = self._throttle.turn(second)
        if lines:
            self._write(b"".join(lines))

    def _write(self, line: bytes) -> None:
        self._stream.write(line.decode())
        self._stream.flush()
