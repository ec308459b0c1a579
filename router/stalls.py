"""Workers that stop answering: requests waiting far past what was expected of them.

A hung engine (a GPU or collective stuck, the API server still up) answers ``/metrics`` but
never the requests sent to it. Its scraped load looks idle, and with prefix affinity the
policy keeps sending it more; each request fails only when the upstream timeout (300 s by
default) ends it, and only failures set a worker aside (``router.ejection``). So each attempt
is watched from dispatch to its first byte (a stream's first token, a whole answer's
arrival): when one waits past its deadline, ``max(floor_s, multiple × expected_s)`` (the
decision's estimate of that wait, when the policy gave one) but at most ``ceiling_s`` (the
upstream timeout, which ends such a wait anyway), its worker counts as **stalled** until every
overdue attempt there has settled. The director treats a stalled worker as it
treats an ejected one: unhealthy to the policy, unless no other worker is left.

A busy engine is not a hung one: an attempt past its deadline whose worker's engine
generated tokens within the last ``floor_s`` (``progress``: when a scrape last found it
running requests and its ``vllm:generation_tokens_total`` risen) is watched on until
``floor_s`` after that, again and again while the engine goes on generating. A long answer asked for
whole (a request without ``max_tokens`` may run to the end of the window) is no stall; an
engine whose counter has stood still for ``floor_s`` is one at the deadline.

A worker that answers neither its requests nor its scrapes (a process stopped or frozen,
its socket still accepting) is told sooner. Its scrapes only time out, so it stayed up for
the scraper's ``slow_grace_s`` (a busy engine answers ``/metrics`` late), and all that while
the policy, seeing it idle and cached, sent it every new request: 39 of them in 12 s, each
then waiting for as long as the freeze lasted. With ``unanswering`` (the workers whose last
scrape failed, each with the time of its last good one) a worker silent for
``silent_after_s`` (5 s) has an attempt overdue whatever its deadline when that attempt was
sent after the last good scrape and has waited ``silent_after_s`` and its estimate (a whole
answer's first byte is the whole answer) without a first byte: the worker is set aside, as
stalled, until its overdue attempts settle. One slow scrape of a busy engine is not enough,
nor a long request sent while its scrapes answered.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

DEFAULT_MULTIPLE = 10.0
# how long an attempt waits for its first byte, at a worker whose scrapes fail too, before
# it counts as overdue (``unanswering``)
SILENT_AFTER_S = 5.0


class StallWatch:
    """Attempts awaiting their first byte, by worker, and which workers have overdue ones."""

    __slots__ = ("_awaiting", "_by_worker", "_ceiling_s", "_deadlines", "_floor_s",
                 "_multiple", "_on_stall", "_overdue", "_tickets", "progress",
                 "silent_after_s", "unanswering")

    def __init__(self, floor_s: float, ceiling_s: float, multiple: float = DEFAULT_MULTIPLE,
                 on_stall: Callable[[str], None] | None = None,
                 progress: Callable[[str], float | None] | None = None,
                 unanswering: Callable[[], Mapping[str, float]] | None = None,
                 silent_after_s: float = SILENT_AFTER_S) -> None:
        """``floor_s``: the least wait that counts as a stall (0: never watch); ``ceiling_s``:
        the most; ``on_stall(worker)`` is told when a worker becomes stalled (metrics);
        ``progress(worker)``: when its engine last generated a token, as last seen (on the
        clock ``now`` reads; None when unknown); ``unanswering()``: the workers whose last
        scrape failed, each with when its last good one was, on the same clock (-inf: none;
        empty almost always: read on each ``stalled``)."""
        self._floor_s = floor_s
        self._ceiling_s = max(floor_s, ceiling_s)
        self._multiple = multiple
        self._on_stall = on_stall
        self.progress = progress
        self.unanswering = unanswering
        self.silent_after_s = silent_after_s
        self._tickets = itertools.count()
        # ticket -> (worker, deadline, request id, sent at)
        self._awaiting: dict[int, tuple[str, float, str, float]] = {}
        self._deadlines: list[tuple[float, int]] = []        # heap of (deadline, ticket)
        self._overdue: dict[str, set[int]] = {}             # worker -> overdue tickets
        # worker -> ticket -> (sent at, when the silent rule may count it): the attempts
        # awaited at each worker, for ``unanswering`` (a scan of those of the silent only)
        self._by_worker: dict[str, dict[int, tuple[float, float]]] = {}

    @property
    def enabled(self) -> bool:
        return self._floor_s > 0.0

    def waiting(self, worker: str, now: float, expected_s: float | None,
                request_id: str = "") -> int:
        """An attempt (of ``request_id``, named in the log when it stalls its worker) was
        sent to ``worker`` at ``now``; returns its ticket for ``settled``."""
        ticket = next(self._tickets)
        if self.enabled:
            bound = self._multiple * expected_s if expected_s is not None else 0.0
            deadline = now + min(self._ceiling_s, max(self._floor_s, bound))
            self._awaiting[ticket] = (worker, deadline, request_id, now)
            patience = max(self.silent_after_s, expected_s or 0.0)
            self._by_worker.setdefault(worker, {})[ticket] = (now, now + patience)
            heapq.heappush(self._deadlines, (deadline, ticket))
            if len(self._deadlines) > 4 * len(self._awaiting) + 1024:    # mostly settled ones
                self._deadlines = [(entry[1], t) for t, entry in self._awaiting.items()]
                heapq.heapify(self._deadlines)
        return ticket

    def settled(self, ticket: int) -> None:
        """The attempt got its first byte, or ended."""
        entry = self._awaiting.pop(ticket, None)
        if entry is None:
            return
        worker = entry[0]
        at_worker = self._by_worker.get(worker)
        if at_worker is not None:
            at_worker.pop(ticket, None)
            if not at_worker:
                del self._by_worker[worker]
        overdue = self._overdue.get(worker)
        if overdue is not None and ticket in overdue:
            overdue.discard(ticket)
            if not overdue:
                del self._overdue[worker]
                log.info("worker %s: its overdue requests have settled; no longer stalled",
                         worker)

    def forget(self, worker: str) -> None:
        """A reloaded fleet file removed the worker or declared it anew: its attempts still
        awaited are not watched any more (overdue, they would set aside the worker next
        declared under its id)."""
        for ticket in [t for t, entry in self._awaiting.items() if entry[0] == worker]:
            del self._awaiting[ticket]
        self._overdue.pop(worker, None)
        self._by_worker.pop(worker, None)

    def stalled(self, now: float) -> frozenset[str]:
        """The workers with an attempt past its deadline at ``now``."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            due, ticket = heapq.heappop(deadlines)
            entry = self._awaiting.get(ticket)
            if entry is None or entry[1] != due:      # settled in time, or re-armed
                continue
            worker, _, request_id, sent_at = entry
            moved_at = self.progress(worker) if self.progress is not None else None
            if moved_at is not None and moved_at > now - self._floor_s:
                deadline = moved_at + self._floor_s   # busy, not hung: watched on
                self._awaiting[ticket] = (worker, deadline, request_id, sent_at)
                heapq.heappush(deadlines, (deadline, ticket))
                continue
            self._overdue_at(worker, request_id, now - sent_at, "past its deadline").add(ticket)
        if self.unanswering is not None and self.enabled:
            silent = self.unanswering()
            if silent:
                self._silent_attempts(silent, now)
        return frozenset(self._overdue) if self._overdue else frozenset()

    def _silent_attempts(self, silent: Mapping[str, float], now: float) -> None:
        """At each worker whose scrapes have failed for ``silent_after_s``, the attempts sent
        after its last good scrape that have waited their patience: overdue."""
        for worker, last_good in silent.items():
            at_worker = self._by_worker.get(worker)
            if at_worker is None or now - last_good < self.silent_after_s:
                continue
            overdue = self._overdue.get(worker)
            for ticket, (sent_at, due) in at_worker.items():
                if sent_at >= last_good and now >= due and (
                        overdue is None or ticket not in overdue):
                    request_id = self._awaiting[ticket][2]
                    overdue = self._overdue_at(worker, request_id, now - sent_at,
                                               "while its /metrics does not answer either")
                    overdue.add(ticket)

    def _overdue_at(self, worker: str, request_id: str, waited_s: float, why: str) -> set[int]:
        """The worker's overdue attempts; a new episode is logged and told."""
        overdue = self._overdue.get(worker)
        if overdue is None:
            overdue = self._overdue[worker] = set()
            log.warning("worker %s: request %s has waited %.1f s, %s, for its first byte; set "
                        "aside while it stays unanswered", worker, request_id or "(unnamed)",
                        waited_s, why)
            if self._on_stall is not None:
                self._on_stall(worker)
        return overdue

    def busy(self, worker: str, now: float) -> bool:
        """Whether the worker's engine generated tokens within the last ``floor_s`` (False
        when the watch is off or nothing is known)."""
        moved_at = self.progress(worker) if self.progress is not None else None
        return self.enabled and moved_at is not None and moved_at > now - self._floor_s

    def is_stalled(self, worker: str, now: float) -> bool:
        return worker in self.stalled(now)
