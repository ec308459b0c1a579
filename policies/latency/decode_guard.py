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
memory is bounded by the requests in flight. A worker's incumbents are kept in the layout
that is cheapest for their count (``policies.latency.incumbents``): a busy worker decodes
hundreds of requests, and every request routed there stalls each of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from policies.latency.estimator import Estimate
from policies.latency.incumbents import (
    Incumbent,
    Incumbents,
    ListedIncumbents,
    resized,
)


@dataclass(slots=True)
class DecodeGuard:
    """Per worker, the incumbents still decoding (see the module docstring)."""

    tpot_objective_s: float
    _by_worker: dict[str, Incumbents] = field(default_factory=dict)
    _worker_of: dict[str, str] = field(default_factory=dict)

    def fits(self, worker_id: str, now: float, estimate: Estimate) -> bool:
        """Whether ``estimate``'s prefill, placed on ``worker_id`` at ``now``, leaves every
        incumbent there within its TPOT objective."""
        return bool(self.fitting((0,), (worker_id,), {worker_id: estimate}, now))

    def fitting(self, positions: Iterable[int], ids: Sequence[str],
                estimates: Mapping[str, Estimate], now: float) -> list[int]:
        """The positions ``p`` whose worker ``ids[p]`` ``fits`` ``estimates[ids[p]]``, in
        order: ``fits`` for a whole candidate list in one call."""
        incumbents_of = self._by_worker.get
        kept: list[int] = []
        for p in positions:     # one loop, without a call per candidate
            worker_id = ids[p]
            incumbents = incumbents_of(worker_id)
            if incumbents is None:
                kept.append(p)
                continue
            estimate = estimates[worker_id]
            prefill = estimate.prefill_s
            # no stall exceeds the prefill itself: most answers need no look at the members
            if prefill <= incumbents.least_slack_s:
                kept.append(p)
                continue
            wait = estimate.ttft_s - prefill       # incumbents.prefill_start, inlined
            starts = now + (wait if wait > 0.0 else 0.0)
            if starts >= incumbents.last_end_s:    # it starts after the last decode ends
                kept.append(p)
            elif starts < incumbents.spent_last_end_s and prefill > 0.0:
                continue                           # it stalls a spent one
            elif not incumbents.unspent_broken(starts, estimate):
                kept.append(p)
        return kept

    def admit(self, request_id: str, worker_id: str, now: float, estimate: Estimate,
              output_tokens: int) -> None:
        """``request_id`` was routed to ``worker_id`` with ``estimate``: spend the incumbents'
        slack and make it one of them."""
        incumbents = self._by_worker.get(worker_id)
        if incumbents is None:
            incumbents = ListedIncumbents()
        intervals = max(0, output_tokens - 1)
        new = None
        if intervals > 0:
            start = now + estimate.ttft_s
            new = Incumbent(request_id, start, start + intervals * estimate.tpot_s,
                            estimate.tpot_s,
                            (self.tpot_objective_s - estimate.tpot_s) * intervals)
        incumbents.admit(now, estimate, new, self._worker_of.pop)
        if new is not None:
            self._worker_of[request_id] = worker_id
        self._by_worker[worker_id] = resized(incumbents)

    def complete(self, request_id: str) -> None:
        worker_id = self._worker_of.pop(request_id, None)
        if worker_id is None:
            return
        incumbents = self._by_worker.get(worker_id)
        if incumbents is not None:
            incumbents.remove(request_id)
            self._by_worker[worker_id] = resized(incumbents)

    def forget_worker(self, worker_id: str) -> None:
        """The worker's incumbents go (its engine restarted, or it left the fleet)."""
        incumbents = self._by_worker.pop(worker_id, None)
        if incumbents is not None:
            for member in incumbents.members():
                self._worker_of.pop(member.request_id, None)

    def incumbents(self, worker_id: str) -> int:
        incumbents = self._by_worker.get(worker_id)
        return incumbents.count if incumbents is not None else 0

    def members(self, worker_id: str) -> list[Incumbent]:
        """A worker's incumbents, least slack first (copies, for inspection)."""
        incumbents = self._by_worker.get(worker_id)
        return incumbents.members() if incumbents is not None else []

    def tracked(self) -> int:
        """Requests held in all (bounded by the requests in flight)."""
        return len(self._worker_of)
