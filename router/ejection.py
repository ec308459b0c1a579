"""Workers whose requests keep failing are set aside for a while (a circuit breaker).

A worker is marked down only when its ``/metrics`` scrapes fail (``workers.scraper``). One
whose scrapes succeed while its requests fail (an engine that answers every generation with a
500, a port that refuses connections behind a live metrics endpoint) would go on getting
first attempts, each costing the client a round trip before the retry. So every request's
fate is recorded here: ``after`` consecutive failures (a connect error, a dropped connection
or a 5xx before the answer began, which the director retries elsewhere; a stream broken
mid-way; no answer within the upstream timeout) **eject** the worker for ``cooldown_s``; a
worker ejected again right after coming back (its next request fails too) stays out twice as
long, up to ``max_cooldown_s``. Any answer that is not such a failure (a 200, a 4xx: the
worker is serving) closes the count and the doubling, if its request was sent after the
worker's latest failure: a long answer begun before the worker broke says nothing of it now
(it took an ejected worker back while it still failed every new request).

The director shows ejected workers to the policy as unhealthy (the ``healthy`` filter passes
them over, and a decision's ``filtered_out`` names them ``ejected``); when that leaves a request no
candidate, it decides again with them (fail open: an ejected worker is still better than none).
Workers whose requests stop answering at all (``router.stalls``) are set aside the same way,
without waiting for those requests to time out. State is per router process, like the
in-flight counts without Redis.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from router.stalls import StallWatch

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Record:
    failures: int = 0             # consecutive, since the last answer that was not a failure
    cooldown_s: float = 0.0       # the last ejection's length (0: none since the last success)
    until: float = 0.0            # ejected until this monotonic time
    failed_at: float = 0.0        # the latest failure


class WorkerEjection:
    """Consecutive request failures per worker, and which workers are ejected now."""

    __slots__ = ("_after", "_base_s", "_max_s", "_on_eject", "_records", "stalls")

    def __init__(self, after: int, cooldown_s: float, max_cooldown_s: float = 300.0,
                 on_eject: Callable[[str, float], None] | None = None,
                 stalls: StallWatch | None = None) -> None:
        """``after`` consecutive failures eject a worker (0: never); ``on_eject(worker,
        seconds)`` is told of each ejection (metrics); ``stalls``: the attempts watched for
        an answer that never comes (none watched when not given)."""
        self.stalls = stalls if stalls is not None else StallWatch(0.0, 0.0)
        self._after = after
        self._base_s = cooldown_s
        self._max_s = max(cooldown_s, max_cooldown_s)
        self._on_eject = on_eject
        self._records: dict[str, _Record] = {}

    @property
    def enabled(self) -> bool:
        return self._after > 0

    def failed(self, worker: str, now: float) -> None:
        """A request to ``worker`` failed (see the module docstring for what counts)."""
        if not self.enabled:
            return
        record = self._records.get(worker)
        if record is None:
            record = self._records[worker] = _Record()
        record.failures += 1
        record.failed_at = max(record.failed_at, now)
        if record.failures < self._after or now < record.until:
            return
        record.cooldown_s = (self._base_s if record.cooldown_s == 0.0
                             else min(self._max_s, record.cooldown_s * 2.0))
        record.until = now + record.cooldown_s
        log.warning("worker %s: %d requests failed in a row; ejected for %g s", worker,
                    record.failures, record.cooldown_s)
        if self._on_eject is not None:
            self._on_eject(worker, record.cooldown_s)

    def answered(self, worker: str, sent_at: float) -> None:
        """A request to ``worker`` sent at ``sent_at`` got an answer (any status but a retried
        failure); one sent before the worker's latest failure changes nothing."""
        record = self._records.get(worker)
        if record is not None and sent_at < record.failed_at:
            return
        if record is not None and (record.failures or record.cooldown_s):
            if record.cooldown_s:
                log.info("worker %s: answering again; no longer ejected", worker)
            del self._records[worker]

    def engine_restarted(self, worker: str) -> None:
        """The worker's engine restarted: its failures so far were the former engine's, and
        it is no longer set aside for them; its last ejection's length is kept, so an engine
        that keeps crashing is set aside longer each time, as before."""
        record = self._records.get(worker)
        if record is not None:
            record.failures = 0
            record.until = 0.0

    def forget(self, worker: str) -> None:
        """A reloaded fleet file removed the worker, added it (again) or declared it anew
        (another server): its failures and stalls so far are not the new one's."""
        self._records.pop(worker, None)
        self.stalls.forget(worker)

    def ejected_for(self, worker: str, now: float) -> float:
        """Seconds ``worker`` stays ejected (0.0: it is not)."""
        record = self._records.get(worker)
        return max(0.0, record.until - now) if record is not None else 0.0

    def ejected(self, now: float) -> frozenset[str]:
        """The workers set aside at ``now``: ejected after failures, or stalled."""
        stalled = self.stalls.stalled(now)
        if not self._records:
            return stalled
        return stalled | self.failed_out(now)

    def failed_out(self, now: float) -> frozenset[str]:
        """The workers ejected after failures at ``now`` (stalled ones not included)."""
        return frozenset(w for w, r in self._records.items() if now < r.until)
