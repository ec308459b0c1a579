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
  one line of ``kind`` ``refusals_suppressed`` (``RefusalThrottle``).
* ``KVROUTE_DECISION_LOG_REFUSAL_LINES_PER_SECOND``: at most this many refusal lines a second
  in all, whatever the tenants (default 100): the tenant is the client's ``x-tenant``, so
  a storm spread over many tenants would otherwise write the per-tenant limit for each. The
  others of that second are counted in one line of ``kind`` ``refusals_suppressed_total``.

Both limits hold per router process (each replica, each process of one, counts its own).

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
``tenant``, ``reason_code``, ``suppressed`` (how many) and ``limit`` (the lines written);
those the total limit held back are ``kind`` ``refusals_suppressed_total``: ``ts``,
``suppressed`` and ``limit``. These counts are written within about a second of the end of
the second they count (``DecisionLogWriter``), with a timer on the writer's event loop.

When an attempt a sampled decision sent ends, a line of ``kind`` ``outcome`` follows
(``outcome_line``): ``ts``, ``request_id``, ``trace_id``, ``attempt``, ``model``, ``worker``,
``tenant``, and how it ended as ``/debug/decisions`` shows it: ``status``, ``ttft_s``,
``tpot_s``, ``e2e_s`` (from its sending), ``client_s`` (from the request's arrival) and the
``prompt_tokens`` and ``completion_tokens`` of its usage: the access log of the requests
routed, joined to their decisions by ``request_id`` and ``attempt``.
"""

from __future__ import annotations

import asyncio
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
ENV_REFUSAL_LINES_PER_SECOND = "KVROUTE_DECISION_LOG_REFUSAL_LINES_PER_SECOND"
# refusal lines a second for one (tenant, reason), unless set
DEFAULT_REFUSALS_PER_SECOND = 10
# refusal lines a second in all, unless set
DEFAULT_REFUSAL_LINES_PER_SECOND = 100
# (tenant, reason) pairs throttled apart within one second; later tenants share OTHER's.
# A pair is only added by a line written, so the total limit bounds them first unless raised.
MAX_THROTTLED_KEYS = 1024
# the ``kind`` of the line counting one second's throttled refusals of a (tenant, reason)
SUPPRESSED_KIND = "refusals_suppressed"
# the ``kind`` of the line counting one second's refusals held back by the total limit
SUPPRESSED_TOTAL_KIND = "refusals_suppressed_total"
# the timer writes the counts of a second this long after it ends (no later traffic needed)
FLUSH_DELAY_S = 0.05


class DecisionLogConfigError(ValueError):
    """A decision-log setting is invalid; the message names the variable."""


@dataclass(frozen=True, slots=True)
class DecisionLogConfig:
    path: str | None = None      # None: off; "-": stdout
    sample_rate: float = 1.0
    refusal_sample_rate: float | None = None     # None: ``sample_rate``
    refusals_per_second: int = DEFAULT_REFUSALS_PER_SECOND
    refusal_lines_per_second: int = DEFAULT_REFUSAL_LINES_PER_SECOND

    def __post_init__(self) -> None:
        for name, rate in ((ENV_SAMPLE, self.sample_rate),
                           (ENV_REFUSAL_SAMPLE, self.refusal_sample_rate)):
            if rate is not None and not 0.0 <= rate <= 1.0:
                raise DecisionLogConfigError(f"{name}: must be between 0 and 1, got {rate!r}")
        for name, lines in ((ENV_REFUSALS_PER_SECOND, self.refusals_per_second),
                            (ENV_REFUSAL_LINES_PER_SECOND, self.refusal_lines_per_second)):
            if lines < 1:
                raise DecisionLogConfigError(f"{name}: must be 1 or more, got {lines!r}")

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
        return cls(path=env.get(ENV_PATH, "").strip() or None,
                   sample_rate=_rate(env, ENV_SAMPLE, 1.0),
                   refusal_sample_rate=_rate(env, ENV_REFUSAL_SAMPLE),
                   refusals_per_second=_lines(env, ENV_REFUSALS_PER_SECOND,
                                              DEFAULT_REFUSALS_PER_SECOND),
                   refusal_lines_per_second=_lines(env, ENV_REFUSAL_LINES_PER_SECOND,
                                                   DEFAULT_REFUSAL_LINES_PER_SECOND))


def _lines(env: Mapping[str, str], name: str, default: int) -> int:
    """The number of lines a second ``name`` sets, else ``default`` (0 is left to the
    config's check, which names the variable)."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not (raw.isascii() and raw.isdigit()):
        raise DecisionLogConfigError(f"{name}: must be a whole number of 1 or more, "
                                     f"got {raw!r}")
    # past 18 digits (int() refuses past 4,300) it is more than any rate
    return int(raw) if len(raw) <= 18 else 10**18


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


def class_predicted(request: RoutingRequest) -> str | None:
    """The classifier's best class, whose probability ``class_confidence`` is (it differs
    from the class given when the classifier was unsure; None: no class was predicted)."""
    value = request.attributes.get("semantic_predicted")
    return value if isinstance(value, str) else None


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
        "class_predicted": class_predicted(request),
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


OUTCOME_KIND = "outcome"


def outcome_line(request: RoutingRequest, decision: Decision, attempt: int,
                 outcome: Mapping[str, Any], at: float) -> bytes:
    """The JSON line (with its newline) for how one routed attempt ended (``outcome``: its
    fields as ``/debug/decisions`` shows them)."""
    record = {"kind": OUTCOME_KIND, "ts": round(at, 6), "request_id": decision.request_id,
              "trace_id": request_trace_id(request.headers), "attempt": attempt,
              "model": decision.model, "worker": decision.worker_id,
              "tenant": request.tenant, **outcome}
    return orjson.dumps(record) + b"\n"


class LineStream(Protocol):
    """Where lines go: a text stream (stdout) or a ``router.followed_file.FollowedFile``."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


class RefusalThrottle:
    """At most ``per_second`` refusals of one (tenant, reason), and ``total_per_second`` in
    all, in one second of the wall clock; those past either are counted, each in one place:
    against its (tenant, reason) when that pair has had its lines, else against the total.

    Bounded, whatever the tenants: a pair is only added by a line written, so at most
    ``total_per_second`` (and ``max_keys``) pairs are told apart within a second, the tenants
    past ``max_keys`` counted together as ``OTHER`` (one pair per reason); a pair counts
    suppressed refusals only once it has written ``per_second`` lines, so a second ends in at
    most ``total_per_second // per_second`` lines of its pairs (and ``OTHER``'s) and one of
    the total; the counts are dropped when the second ends."""

    __slots__ = ("_counts", "_max_keys", "_over_total", "_per_second", "_total",
                 "_written", "second", "suppressing")

    def __init__(self, per_second: int,
                 total_per_second: int = DEFAULT_REFUSAL_LINES_PER_SECOND,
                 max_keys: int = MAX_THROTTLED_KEYS) -> None:
        self._per_second = per_second
        self._total = total_per_second
        self._max_keys = max_keys
        # (tenant, reason) -> [refusals let through, refusals suppressed] in ``second``
        self._counts: dict[tuple[str | None, str], list[int]] = {}
        self._written = 0              # refusals let through in ``second``, all pairs
        self._over_total = 0           # refusals of ``second`` the total limit held back
        self.second = 0                # the second counted (int(unix time))
        self.suppressing = False       # whether a refusal of ``second`` was suppressed

    @property
    def pairs(self) -> int:
        """The (tenant, reason) pairs told apart in ``second``."""
        return len(self._counts)

    def allow(self, tenant: str | None, reason: str) -> bool:
        """Whether a refusal of ``second`` is written (else it is counted)."""
        counts = self._counts.get((tenant, reason))
        if counts is None:
            if self._written >= self._total:      # no line left: no pair added
                self._over_total += 1
                self.suppressing = True
                return False
            key = (tenant, reason) if len(self._counts) < self._max_keys else (OTHER, reason)
            counts = self._counts.setdefault(key, [0, 0])
        if counts[0] >= self._per_second:
            counts[1] += 1
        elif self._written >= self._total:
            self._over_total += 1
        else:
            counts[0] += 1
            self._written += 1
            return True
        self.suppressing = True
        return False

    def turn(self, second: int) -> list[bytes]:
        """Start counting ``second``: the lines of the refusals suppressed in the one that
        ended (``refusals_suppressed``, then ``refusals_suppressed_total``)."""
        lines: list[bytes] = []
        if self.suppressing:
            lines = [orjson.dumps({"kind": SUPPRESSED_KIND, "ts": self.second, "tenant": tenant,
                                   "reason_code": reason, "suppressed": counts[1],
                                   "limit": self._per_second}) + b"\n"
                     for (tenant, reason), counts in self._counts.items() if counts[1]]
            if self._over_total:
                lines.append(orjson.dumps({"kind": SUPPRESSED_TOTAL_KIND, "ts": self.second,
                                           "suppressed": self._over_total,
                                           "limit": self._total}) + b"\n")
        self._counts.clear()
        self._written = self._over_total = 0
        self.second, self.suppressing = second, False
        return lines


class DecisionLogWriter:
    """A decision sink and a refusal sink writing sampled lines to a text stream it does not
    own. Refusals are sampled at ``refusal_rate`` (default ``sample_rate``), each by a draw,
    and throttled per (tenant, reason) and in all (``RefusalThrottle``).

    The count of a second's throttled refusals is written with the first refusal or sampled
    decision of a later second, or at ``close``; given a ``loop``, also by a timer there,
    set by the first refusal a second suppresses to fire ``FLUSH_DELAY_S`` after that
    second ends (at most about a second on), so the count is written then without new
    traffic; ``close`` cancels it. Without a loop (a writer used outside one) there is no
    timer. A router killed outright loses the counts of the second under way."""

    __slots__ = ("_clock", "_draw", "_loop", "_rate", "_refusal_rate", "_stream",
                 "_throttle", "_timer")

    def __init__(self, stream: LineStream, sample_rate: float = 1.0,
                 clock: Callable[[], float] = time.time, *,
                 refusal_rate: float | None = None,
                 refusals_per_second: int = DEFAULT_REFUSALS_PER_SECOND,
                 refusal_lines_per_second: int = DEFAULT_REFUSAL_LINES_PER_SECOND,
                 draw: Callable[[], float] = random.random,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._stream = stream
        self._rate = sample_rate
        self._refusal_rate = sample_rate if refusal_rate is None else refusal_rate
        self._clock = clock
        self._draw = draw
        self._throttle = RefusalThrottle(refusals_per_second, refusal_lines_per_second)
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None

    @classmethod
    def configured(cls, stream: LineStream, config: DecisionLogConfig,
                   loop: asyncio.AbstractEventLoop | None = None) -> DecisionLogWriter:
        """A writer as ``config`` says (``loop``: where its timer runs)."""
        return cls(stream, config.sample_rate, refusal_rate=config.refusal_rate,
                   refusals_per_second=config.refusals_per_second,
                   refusal_lines_per_second=config.refusal_lines_per_second, loop=loop)

    def on_decision(self, request: RoutingRequest, decision: Decision, attempt: int,
                    seconds: float, routing_sha256: str | None = None) -> None:
        if not sampled(decision.request_id, self._rate):
            return
        at = self._clock()
        if self._throttle.suppressing and int(at) != self._throttle.second:
            self._turn(int(at))
        self._write(decision_line(request, decision, attempt, seconds, at, routing_sha256))

    def on_outcome(self, request: RoutingRequest, decision: Decision, attempt: int,
                   outcome: Mapping[str, Any]) -> None:
        """How an attempt ended: a line when its decision was sampled (by request id, as
        its decision's line)."""
        if sampled(decision.request_id, self._rate):
            self._write(outcome_line(request, decision, attempt, outcome, self._clock()))

    def on_refusal(self, record: RefusalRecord) -> None:
        """A request refused before routing: a line too, if drawn at the refusals' rate and
        neither its (tenant, reason) nor all refusals have had their lines this second."""
        if self._refusal_rate < 1.0 and self._draw() >= self._refusal_rate:
            return
        throttle = self._throttle
        second = int(record.at)
        if second != throttle.second:
            self._turn(second)
        if throttle.allow(record.tenant, record.reason):
            self._write(refusal_line(record))
        elif self._timer is None and self._loop is not None:
            self._arm()

    def close(self) -> None:
        """Cancel the timer and write the count of the refusals throttled in the second
        under way (the stream is not closed)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop = None
        if self._throttle.suppressing:
            self._turn(self._throttle.second)

    def _arm(self) -> None:
        """Set the timer to fire just after the second counted ends (at most about a second
        from now: a wall clock set back does not hold the count)."""
        assert self._loop is not None
        delay = min(max(self._throttle.second + 1 - self._clock(), 0.0), 1.0) + FLUSH_DELAY_S
        self._timer = self._loop.call_later(delay, self._flush)

    def _flush(self) -> None:
        """The timer: write the count of a second that has ended, else wait for its end."""
        self._timer = None
        if not self._throttle.suppressing:
            return                  # a later refusal or decision wrote it
        now = int(self._clock())
        if now != self._throttle.second:
            try:
                self._turn(now)
            except Exception:       # as a sink's failure: what could not be written is lost
                return
        elif self._loop is not None:
            self._arm()

    def _turn(self, second: int) -> None:
        lines = self._throttle.turn(second)
        if lines:
            self._write(b"".join(lines))

    def _write(self, line: bytes) -> None:
        self._stream.write(line.decode())
        self._stream.flush()
