"""One worker's incumbents for the decode guard, in two layouts with one interface.

An incumbent is a request the router placed on a worker that is still decoding there, with
the TPOT slack it has left (``policies.latency.decode_guard``). Every admission there stalls
each incumbent, so its cost grows with the worker's batch:

* ``ListedIncumbents`` keeps one ``Incumbent`` object per request and walks them in Python:
  the cheapest layout for a few dozen;
* ``ArrayIncumbents`` keeps the columns start, end, TPOT and slack of one numpy array, so an
  admission stalls hundreds in a few array operations (numpy's fixed cost per call is more
  than the Python loop over a few).

``resized`` moves a worker from one layout to the other as its count crosses
``ARRAYS_FROM`` / ``LISTS_BELOW``. Both run the same floating-point operations in the same
order (``stall_of`` is the definition), so the incumbents, their order (least slack first,
a stable sort) and every bound are the same to the bit in either layout.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol

import numpy as np
import numpy.typing as npt

from policies.latency.estimator import Estimate

ARRAYS_FROM = 64      # a listed worker reaching this many incumbents moves to arrays
LISTS_BELOW = 32      # an arrayed one falling below this many moves back to lists
WALKED_ONE_BY_ONE = 16   # fewer arrayed members than this at risk: checked in a Python loop

_START, _END, _TPOT, _SLACK, _KEY = range(5)     # the rows of ArrayIncumbents' columns
_INITIAL_CAPACITY = 2 * ARRAYS_FROM
_least, _most = np.minimum.reduce, np.maximum.reduce     # ndarray.min / max, without their wrappers

Forget = Callable[[str, None], object]     # dict.pop of the guard's request -> worker map


@dataclass(slots=True)
class Incumbent:
    request_id: str
    start_s: float        # estimated first token
    end_s: float          # estimated last token
    tpot_s: float         # estimated seconds per output token
    slack_s: float        # decode time it may still lose and meet the TPOT objective


def stall_of(incumbent: Incumbent, starts: float, estimate: Estimate) -> float:
    """Decode time ``incumbent`` loses to a prefill that starts at ``starts``: its prefill
    compute, or the share of it in the engine steps the incumbent has left."""
    if starts >= incumbent.end_s or estimate.prefill_s <= 0.0:
        return 0.0
    left = (incumbent.end_s - max(starts, incumbent.start_s)) / incumbent.tpot_s \
        if incumbent.tpot_s > 0 else float(estimate.prefill_steps)
    steps = estimate.prefill_steps
    return estimate.prefill_s * (1.0 if left >= steps else left / steps)


def prefill_start(now: float, estimate: Estimate) -> float:
    """When ``estimate``'s own prefill starts: after its estimated wait."""
    wait = estimate.ttft_s - estimate.prefill_s
    return now + (wait if wait > 0.0 else 0.0)


class Incumbents(Protocol):
    """One worker's incumbents, least slack first, with the bounds that answer most
    ``fits`` at once."""

    least_slack_s: float       # no stall up to this breaks a member
    last_end_s: float          # a prefill starting after this stalls none
    # members whose slack is spent (<= 0) are broken by any stall at all, that is by any
    # prefill starting before their last token: the latest of those tokens answers for all
    # of them, and only the others (``unspent``, least slack first) need a look one by one
    spent_last_end_s: float

    @property
    def count(self) -> int: ...

    def admit(self, now: float, estimate: Estimate, new: Incumbent | None,
              forget: Forget) -> None:
        """Forget (``forget(request_id, None)``) the members done by ``now`` by their
        estimates, stall every other by ``estimate``'s prefill (``stall_of``: its slack
        spent, its last token pushed back), then add ``new``."""

    def remove(self, request_id: str) -> None:
        """Drop every member of ``request_id``."""

    def unspent_broken(self, starts: float, estimate: Estimate) -> bool:
        """Whether a prefill starting at ``starts`` stalls an unspent member past its
        slack."""

    def members(self) -> list[Incumbent]:
        """Every member, least slack first (copies)."""


def resized(incumbents: Incumbents) -> Incumbents:
    """``incumbents`` in the layout for its count (the same members, order and bounds)."""
    count = incumbents.count
    if isinstance(incumbents, ListedIncumbents):
        return ArrayIncumbents(incumbents.members()) if count >= ARRAYS_FROM else incumbents
    if count < LISTS_BELOW:
        return ListedIncumbents(incumbents.members())
    return incumbents


_slack = attrgetter("slack_s")
_end = attrgetter("end_s")


class ListedIncumbents:
    """One ``Incumbent`` per member, in a list least slack first."""

    __slots__ = ("_members", "_unspent", "last_end_s", "least_slack_s", "spent_last_end_s")

    def __init__(self, members: list[Incumbent] | None = None) -> None:
        self._members: list[Incumbent] = members if members is not None else []
        self.least_slack_s = math.inf
        self.last_end_s = -math.inf
        self.spent_last_end_s = -math.inf
        self._unspent: list[Incumbent] = []
        self._refresh()

    @property
    def count(self) -> int:
        return len(self._members)

    def admit(self, now: float, estimate: Estimate, new: Incumbent | None,
              forget: Forget) -> None:
        # one pass, stall_of inlined: every request routed here visits each member
        kept: list[Incumbent] = []
        keep = kept.append
        prefill = estimate.prefill_s
        steps = estimate.prefill_steps
        starts = prefill_start(now, estimate)
        for incumbent in self._members:
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
        if new is not None:
            keep(new)
        self._members = kept
        self._refresh()

    def remove(self, request_id: str) -> None:
        self._members[:] = [i for i in self._members if i.request_id != request_id]
        self._refresh()

    def unspent_broken(self, starts: float, estimate: Estimate) -> bool:
        prefill = estimate.prefill_s
        if prefill <= 0.0:            # stalls nothing (stall_of)
            return False
        steps = estimate.prefill_steps
        for incumbent in self._unspent:      # least slack first
            slack = incumbent.slack_s
            if slack >= prefill:      # neither it nor any after it can be broken
                return False
            # stall_of, inlined: the same operations in the same order
            end = incumbent.end_s
            if starts >= end:
                continue
            tpot, start = incumbent.tpot_s, incumbent.start_s
            left = (end - (start if start > starts else starts)) / tpot if tpot > 0 \
                else float(steps)
            stall = prefill * (1.0 if left >= steps else left / steps)
            if stall > 0.0 and stall > slack:
                return True
        return False

    def members(self) -> list[Incumbent]:
        return [Incumbent(i.request_id, i.start_s, i.end_s, i.tpot_s, i.slack_s)
                for i in self._members]

    def _refresh(self) -> None:
        members = self._members
        members.sort(key=_slack)
        if not members:
            self.least_slack_s = math.inf
            self.last_end_s = self.spent_last_end_s = -math.inf
            self._unspent = []
            return
        self.least_slack_s = members[0].slack_s
        self.last_end_s = max(map(_end, members))
        # least slack first, so the spent members (slack <= 0) are the leading ones
        spent = bisect_right(members, 0.0, key=_slack)
        self.spent_last_end_s = max(map(_end, members[:spent]), default=-math.inf)
        self._unspent = members[spent:]


class ArrayIncumbents:
    """The members' request ids, and their columns start, end, TPOT, slack and key (a
    number of their own, found by a float comparison where an id would take a string one)
    in one array (the first ``count`` places of each), least slack first."""

    __slots__ = ("_columns", "_count", "_first_unspent_slack_s", "_ids", "_keys",
                 "_next_key", "_spent", "last_end_s", "least_slack_s", "spent_last_end_s")

    def __init__(self, members: list[Incumbent]) -> None:
        n = len(members)
        capacity = max(_INITIAL_CAPACITY, 2 * n)
        self._ids: npt.NDArray[np.object_] = np.empty(capacity, dtype=object)
        self._columns: npt.NDArray[np.float64] = np.empty((5, capacity))
        self._ids[:n] = [i.request_id for i in members]
        self._columns[:, :n] = ([i.start_s for i in members], [i.end_s for i in members],
                                [i.tpot_s for i in members], [i.slack_s for i in members],
                                range(n))
        self._keys: dict[str, list[int]] = {}     # request id -> its members' keys
        for key, member in enumerate(members):
            self._keys.setdefault(member.request_id, []).append(key)
        self._next_key = n
        self._count = n
        self.least_slack_s = math.inf
        self.last_end_s = self.spent_last_end_s = -math.inf
        self._spent = 0
        self._first_unspent_slack_s = math.inf
        self._refresh()

    @property
    def count(self) -> int:
        return self._count

    def admit(self, now: float, estimate: Estimate, new: Incumbent | None,
              forget: Forget) -> None:
        live = self._columns[:, :self._count]
        if self._count and _least(live[_END]) <= now:
            done = live[_END] <= now
            keys = self._keys
            for request_id, key in zip(self._ids[:self._count][done].tolist(),
                                       live[_KEY][done].tolist(), strict=True):
                forget(request_id, None)
                held = keys[request_id]
                held.remove(int(key))
                if not held:
                    del keys[request_id]
            self._keep(~done)
            live = self._columns[:, :self._count]
        prefill = estimate.prefill_s
        if self._count and prefill > 0.0:
            starts = prefill_start(now, estimate)
            if starts < self.last_end_s:      # (set before the done left: still >= every end)
                stalled = starts < live[_END]
                stall = _stalls(live, starts, prefill, estimate.prefill_steps)
                np.subtract(live[_SLACK], stall, out=live[_SLACK], where=stalled)
                np.add(live[_END], stall, out=live[_END], where=stalled)
        self._sort()
        if new is not None:
            self._insert(new)
        self._set_bounds()

    def remove(self, request_id: str) -> None:
        keys = self._keys.pop(request_id, None)
        if keys is None:
            return
        n = self._count
        live = self._columns[:, :n]
        if len(keys) > 1:
            self._keep(~np.isin(live[_KEY], keys))
        else:     # one member: the ones after it move up a place
            at = int((live[_KEY] == keys[0]).argmax())
            self._columns[:, at:n - 1] = self._columns[:, at + 1:n]
            self._ids[at:n - 1] = self._ids[at + 1:n]
            self._ids[n - 1] = None
            self._count = n - 1
        self._set_bounds()

    def unspent_broken(self, starts: float, estimate: Estimate) -> bool:
        prefill = estimate.prefill_s
        if self._first_unspent_slack_s >= prefill:   # no unspent one can be broken
            return False
        # the unspent members with less slack than the prefill, least slack first
        unspent = self._columns[:, self._spent:self._count]
        below = int(unspent[_SLACK].searchsorted(prefill, side="left"))
        if below >= WALKED_ONE_BY_ONE:
            at_risk = unspent[:, :below]
            stalls = _stalls(at_risk, starts, prefill, estimate.prefill_steps)
            return bool(((starts < at_risk[_END]) & (stalls > 0.0)
                         & (stalls > at_risk[_SLACK])).any())
        steps = estimate.prefill_steps
        for start, end, tpot, slack in zip(*unspent[:_KEY, :below].tolist(), strict=True):
            if starts >= end:
                continue
            left = (end - max(starts, start)) / tpot if tpot > 0 else float(steps)
            stall = prefill * (1.0 if left >= steps else left / steps)
            if stall > 0.0 and stall > slack:
                return True
        return False

    def members(self) -> list[Incumbent]:
        start, end, tpot, slack = self._columns[:_KEY, :self._count].tolist()
        return [Incumbent(*member) for member in zip(
            self._ids[:self._count].tolist(), start, end, tpot, slack, strict=True)]

    def _insert(self, new: Incumbent) -> None:
        """``new`` in its place by slack among sorted members, after any equal (where a
        stable sort of the members with it last puts it)."""
        n = self._count
        if n == self._ids.shape[0]:
            ids: npt.NDArray[np.object_] = np.empty(2 * n, dtype=object)
            ids[:n] = self._ids
            columns: npt.NDArray[np.float64] = np.empty((5, 2 * n))
            columns[:, :n] = self._columns
            self._ids, self._columns = ids, columns
        columns = self._columns
        at = int(columns[_SLACK, :n].searchsorted(new.slack_s, side="right"))
        if at < n:
            columns[:, at + 1:n + 1] = columns[:, at:n]
            self._ids[at + 1:n + 1] = self._ids[at:n]
        key = self._next_key
        self._next_key = key + 1
        self._keys.setdefault(new.request_id, []).append(key)
        self._ids[at] = new.request_id
        column = columns[:, at]
        column[_START], column[_END], column[_TPOT], column[_SLACK], column[_KEY] = (
            new.start_s, new.end_s, new.tpot_s, new.slack_s, key)
        self._count = n + 1

    def _keep(self, kept: npt.NDArray[np.bool_]) -> None:
        """Keep the members where ``kept`` is true, in their order."""
        n = self._count
        left = int(np.count_nonzero(kept))
        self._columns[:, :left] = self._columns[:, :n][:, kept]
        self._ids[:left] = self._ids[:n][kept]
        self._ids[left:n] = None       # no reference kept to the ids dropped
        self._count = left

    def _sort(self) -> None:
        """Least slack first again (a stable sort, as the members came)."""
        n = self._count
        live = self._columns[:, :n]
        slack = live[_SLACK]
        if n < 2 or bool((slack[1:] >= slack[:-1]).all()):
            return
        order = np.argsort(slack, kind="stable")
        live[:] = live[:, order]
        self._ids[:n] = self._ids[:n][order]

    def _set_bounds(self) -> None:
        n = self._count
        if n == 0:
            self.least_slack_s = self._first_unspent_slack_s = math.inf
            self.last_end_s = self.spent_last_end_s = -math.inf
            self._spent = 0
            return
        live = self._columns[:, :n]
        slack, end = live[_SLACK], live[_END]
        self.least_slack_s = float(slack[0])
        self.last_end_s = float(_most(end))
        spent = self._spent = int(slack.searchsorted(0.0, side="right"))
        self.spent_last_end_s = float(_most(end[:spent])) if spent else -math.inf
        self._first_unspent_slack_s = float(slack[spent]) if spent < n else math.inf

    def _refresh(self) -> None:
        self._sort()
        self._set_bounds()


def _stalls(columns: npt.NDArray[np.float64], starts: float, prefill: float,
            steps: int) -> npt.NDArray[np.float64]:
    """``stall_of`` for every member of ``columns`` that is still decoding at ``starts``
    (the others' entries mean nothing), to the bit: ``prefill x min(left, steps) / steps``
    is ``prefill`` itself where ``left >= steps`` (``steps / steps`` is exactly 1)."""
    start, end, tpot = columns[_START], columns[_END], columns[_TPOT]
    left: npt.NDArray[np.float64] = np.maximum(start, starts)
    np.subtract(end, left, out=left)
    if _least(tpot) > 0.0:
        left /= tpot
    else:           # no TPOT: the whole prefill, as stall_of counts it
        np.divide(left, tpot, out=left, where=tpot > 0.0)
        left[tpot <= 0.0] = steps
    np.minimum(left, steps, out=left)
    left /= steps
    left *= prefill
    return left
