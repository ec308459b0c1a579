"""The ids and positions of one decision's candidates, built once and shared by its plugins.

Every scorer of a profile sees the same candidate list, and in a running router that list
holds the same ``WorkerInfo`` objects in the same order from one decision to the next (views
are rebuilt per request, the fleet is not). ``CandidateIndex`` gathers what follows from the
infos alone: the ids in view order and each id's position. ``CandidateIndexCache`` (one per
profile) keeps the last index and returns it again while the infos repeat, which costs one
C-level pass over the views instead of a Python-level pass per plugin.

The profile leaves the index in the ``CycleState`` next to the list it describes;
``candidate_index(cycle, workers)`` hands it to a plugin given that very list and builds a
fresh one otherwise (a plugin called outside a profile, or on a list of its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from policies.base import CycleState
from workers.models import WorkerInfo, WorkerView

CANDIDATES_KEY = "candidates.index"   # CycleState key -> (the views, their CandidateIndex)

_info = attrgetter("info")
_id = attrgetter("id")


class CandidateIndex:
    """Ids and positions of a candidate list, in view order. Read-only once built: the ids
    list becomes the decision table's (``policies.candidates.CandidateTable``)."""

    __slots__ = ("ids", "infos", "position")

    def __init__(self, infos: list[WorkerInfo]) -> None:
        self.infos = infos
        self.ids: list[str] = list(map(_id, infos))
        position = dict(zip(self.ids, range(len(self.ids)), strict=True))
        if len(position) != len(self.ids):    # an id repeats: its first position, as list.index
            position = {}
            for at, worker_id in enumerate(self.ids):
                position.setdefault(worker_id, at)
        self.position: dict[str, int] = position

    def __len__(self) -> int:
        return len(self.ids)


class CandidateIndexCache:
    """The last candidate list's index, reused while the views carry the same infos."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: CandidateIndex | None = None

    def index(self, views: Sequence[WorkerView]) -> CandidateIndex:
        infos = list(map(_info, views))
        last = self._last
        if last is None or last.infos != infos:
            last = self._last = CandidateIndex(infos)
        return last


def share_index(cycle: CycleState, views: Sequence[WorkerView], index: CandidateIndex) -> None:
    """Make ``index`` (of ``views``) the one ``candidate_index`` returns for that list."""
    cycle.write(CANDIDATES_KEY, (views, index))


def candidate_index(cycle: CycleState, views: Sequence[WorkerView]) -> CandidateIndex:
    """The index of ``views``: the profile's when ``views`` is the list it scores, else one
    built now (and shared for the rest of the decision)."""
    entry: tuple[Sequence[WorkerView], CandidateIndex] | None = cycle.read(CANDIDATES_KEY)
    if entry is not None and entry[0] is views:
        return entry[1]
    index = CandidateIndex(list(map(_info, views)))
    cycle.write(CANDIDATES_KEY, (views, index))
    return index
