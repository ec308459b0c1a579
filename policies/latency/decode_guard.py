"""Decode guard: the TPOT promises already made on each worker, and what a new prefill costs them.

A request's TPOT is its decode time divided by its output tokens, so every prefill chunk
that lands in the same engine steps while it decodes stretches it (chunked prefill shares
each step between the running decodes and one chunk of the new prompt). A short answer is
the most fragile: one 2,000-token prompt admitted beside a 10-token answer can double its
TPOT. Those later prefills are the router's own choices, so the router can keep the promise
it made when it placed a request: each routed request becomes an *incumbent* of its worker
with a TPOT *slack*, the decode time it may still lose before its mean inter-token time
passes the objective::

    slack = (tpot objective - estimated tpot) x (output tokens - 1)

A new prompt placed on the worker stalls every incumbent still decoding when its prefill
starts by its own prefill compute, or by the share of it that falls in the engine steps
the incumbent has left (``prefill_s x min(1, steps left / prefill steps)``). ``fits`` says
whether every incumbent keeps a non-negative slack; ``admit`` spends the slack and records
the new incumbent. An incumbent whose slack is already spent (a stall the guard could not
avoid) refuses any further stall, but not a prefill that starts after its decode ends.
Windows are estimates (arrival + estimated TTFT, then estimated TPOT per token), so an
incumbent is forgotten at its estimated end or when it completes, whichever comes first;
memory is bounded by the requests in flight.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from policies.latency.estimator import Estimate


@dataclass(slots=True)
class Incumbent:
    request_id: str
    start_s: float        # estimated first token
    end_s: float          # estimated last token
    tpot_s: float         # estimated seconds per output token
    slack_s: float        # decode time it may still lose and meet the TPOT objective


@dataclass(slots=True)
class _Incumbents:
    """One worker's incumbents, with the bounds that answer most ``fits`` at once."""

    members: list[Incumbent] = field(default_factory=list)   # least slack first
    least_slack_s: float = math.inf     # no stall up to this breaks a member
    last_end_s: float = -math.inf       # a prefill starting after this stalls none
    # members whose slack is spent (<= 0) are broken by any stall at all, that is by any
    # prefill starting before their last token: the latest of those tokens answers for all
    # of them, and only the others (``unspent``, least slack first) need a look one by one
    spent_last_end_s: float = -math.inf
    unspent: list[Incumbent] = field(default_factory=list)

    def refresh(self) -> None:
        members = self.members
        members.sort(key=_slack)
        if not members:
            self.least_slack_s = math.inf
            self.last_end_s = self.spent_last_end_s = -math.inf
            self.unspent = []
            return
        self.least_slack_s = members[0].slack_s
        self.last_end_s = max(map(_end, members))
        # least slack first, so the spent members (slack <= 0) are the leading ones
        spent = bisect_right(members, 0.0, key=_slack)
        self.spent_last_end_s = max(map(_end, members[:spent]), default=-math.inf)
        self.unspent = members[spent:]


@dataclass(slots=True)
class DecodeGuard:
    """Per worker, the incumbents still decoding (see the module docstring)."""

    tpot_objective_s: float
    _by_worker: dict[str, _Incumbents] = field(default_factory=dict)
    _worker_of: dict[str, str] = field(default_factory=dict)

    def fits(self, worker_id: str, now: float, estimate: Estimate) -> bool:
        """Whether ``estimate``'s prefill, placed on ``worker_id`` at ``now``, leaves every
        incumbent there within its TPOT objective."""
        incumbents = self._by_worker.get(worker_id)
        return incumbents is None or _spares(incumbents, now, estimate)

    def fitting(self, positions: Iterable[int], ids: Sequence[str],
                estimates: Mapping[str, Estimate], now: float) -> list[int]:
        """The positions ``p`` whose worker ``ids[p]`` ``fits`` ``estimates[ids[p]]``, in
        order: ``fits`` for a whole candidate list in one call."""
        incumbents_of = self._by_worker.get
        return [p for p in positions
                if (incumbents := incumbents_of(ids[p])) is None
                or _spares(incumbents, now, estimates[ids[p]])]

    def admit(self, request_id: str, worker_id: str, now: float, estimate: Estimate,
              output_tokens: int) -> None:
        """``request_id`` was routed to ``worker_id`` with ``estimate``: spend the incumbents'
        slack and make it one of them."""
        incumbents = self._by_worker.get(worker_id)
        if incumbents is None:
            incumbents = self._by_worker[worker_id] = _Incumbents()
        members = incumbents.members
        if members:
            members = incumbents.members = self._stalled(members, now, estimate)
        intervals = max(0, output_tokens - 1)
        if intervals > 0:
            start = now + estimate.ttft_s
            members.append(Incumbent(
                request_id, start, start + intervals * estimate.tpot_s, estimate.tpot_s,
                (self.tpot_objective_s - estimate.tpot_s) * intervals))
            self._worker_of[request_id] = worker_id
        incumbents.refresh()

    def complete(self, request_id: str) -> None:
        worker_id = self._worker_of.pop(request_id, None)
        if worker_id is None:
            return
        incumbents = self._by_worker.get(worker_id)
        if incumbents is not None:
            incumbents.members[:] = [i for i in incumbents.members
                                     if i.request_id != request_id]
            incumbents.refresh()

    def incumbents(self, worker_id: str) -> int:
        incumbents = self._by_worker.get(worker_id)
        return len(incumbents.members) if incumbents is not None else 0

    def tracked(self) -> int:
        """Requests held in all (bounded by the requests in flight)."""
        return len(self._worker_of)

    def _stalled(self, members: list[Incumbent], now: float,
                 estimate: Estimate) -> list[Incumbent]:
        """The members still decoding at ``now`` (by their estimates; the others are
        forgotten), each stalled by ``estimate``'s prefill as ``_stall`` prices it: its slack
        spent and its last token pushed back. One pass, ``_stall`` inlined: a busy worker
        holds hundreds of incumbents, and every request routed there visits each."""
        forget = self._worker_of.pop
        kept: list[Incumbent] = []
        keep = kept.append
        prefill = estimate.prefill_s
        steps = estimate.prefill_steps
        wait = estimate.ttft_s - prefill
        starts = now + (wait if wait > 0.0 else 0.0)
        for incumbent in members:
            end = incumbent.end_s
            if end <= now:                     # done by its estimate
                forget(incumbent.request_id, None)
                continue
            keep(incumbent)
            if starts >= end or prefill <= 0.0:
                continue
            tpot = incumbent.tpot_s
            if tpot > 0:
                begin = incumbent.start_s
                left = (end - (starts if starts > begin else begin)) / tpot
                stall = prefill if left >= steps else prefill * (left / steps)
            else:
                stall = prefill
            incumbent.slack_s -= stall
            incumbent.end_s = end + stall
        return kept


_slack = attrgetter("slack_s")
_end = attrgetter("end_s")


def _spares(incumbents: _Incumbents, now: float, estimate: Estimate) -> bool:
    """``fits`` on one worker's incumbents."""
    prefill = estimate.prefill_s
    # no stall exceeds the prefill itself: most answers need no look at the members
    if prefill <= incumbents.least_slack_s:
        return True
    wait = estimate.ttft_s - prefill
    starts = now + wait if wait > 0.0 else now
    if starts >= incumbents.last_end_s:      # it starts after the last decode ends
        return True
    if starts < incumbents.spent_last_end_s and prefill > 0.0:   # it stalls a spent one
        return False
    for incumbent in incumbents.unspent:      # least slack first
        slack = incumbent.slack_s
        if slack >= prefill:      # neither it nor any after it can be broken
            return True
        stall = _stall(incumbent, starts, estimate)
        if stall > 0.0 and stall > slack:
            return False
    return True


def _stall(incumbent: Incumbent, starts: float, estimate: Estimate) -> float:
    """Decode time ``incumbent`` loses to a prefill that starts at ``starts``."""
    if starts >= incumbent.end_s or estimate.prefill_s <= 0.0:
        return 0.0
    left = (incumbent.end_s - max(starts, incumbent.start_s)) / incumbent.tpot_s \
        if incumbent.tpot_s > 0 else float(estimate.prefill_steps)
    steps = estimate.prefill_steps
    return estimate.prefill_s * (1.0 if left >= steps else left / steps)
