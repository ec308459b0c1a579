"""A decision's scored candidates, stored by column and turned into objects when read.

At a thousand workers, building a ``CandidateScore`` and a scores dict per candidate costs
more than the scoring itself, while the request path reads only the chosen one (and the
``max-score`` picker only the totals). ``/debug/decisions`` and the decision log read every
candidate, later and rarely. So a profile run keeps, in view order, each scorer's column and
the weighted totals (``CandidateTable``); a ``CandidateScore`` is built the first time its
position is read and the same object is returned on every later read, so identity checks
(``picker returned one of the candidates``) keep working. ``RankedCandidates`` is the table
in descending total, view order on ties (a stable sort), sorted on first read.

Both are read-only sequences that compare equal to a tuple of the same candidates, and
pickle as plain tuples.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

from policies.base import CandidateScore

# CandidateScore is a frozen slots dataclass without __post_init__: filling its slots through
# their descriptors builds the same object as its __init__, about 2.5x faster.
_set_worker_id = vars(CandidateScore)["worker_id"].__set__
_set_total = vars(CandidateScore)["total"].__set__
_set_scores = vars(CandidateScore)["scores"].__set__


def new_candidate(worker_id: str, total: float, scores: Mapping[str, float]) -> CandidateScore:
    candidate: CandidateScore = object.__new__(CandidateScore)
    _set_worker_id(candidate, worker_id)
    _set_total(candidate, total)
    _set_scores(candidate, scores)
    return candidate


class _LazySequence(Sequence[CandidateScore]):
    """Equality, hashing, repr and pickling as the tuple of the same candidates."""

    __slots__ = ()

    def as_tuple(self) -> tuple[CandidateScore, ...]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[CandidateScore]:
        return iter(self.as_tuple())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _LazySequence):
            return self.as_tuple() == other.as_tuple()
        if isinstance(other, (tuple, list)):
            return list(self.as_tuple()) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __repr__(self) -> str:
        return repr(self.as_tuple())

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (self.as_tuple(),))


class CandidateTable(_LazySequence):
    """Candidates in view order: ids, weighted totals, and one score column per scorer."""

    __slots__ = ("_index", "_made", "columns", "ids", "names", "totals")

    def __init__(self, ids: list[str], totals: list[float], names: list[str],
                 columns: list[list[float]], position: Mapping[str, int] | None = None) -> None:
        self.ids = ids                  # read-only: may be shared with later decisions
        self.totals = totals
        self.names = names              # scorer names, one per column (as ``scores`` keys)
        self.columns = columns
        self._made: list[CandidateScore | None] = [None] * len(ids)
        # id -> position, when given (``policies.candidate_index``) or first needed
        self._index: Mapping[str, int] | None = position

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> CandidateScore: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[CandidateScore, ...]: ...

    def __getitem__(self, index: int | slice) -> CandidateScore | tuple[CandidateScore, ...]:
        if isinstance(index, slice):
            return tuple(map(self.at, range(*index.indices(len(self.ids)))))
        count = len(self.ids)
        position = index + count if index < 0 else index
        if not 0 <= position < count:
            raise IndexError("candidate index out of range")
        return self.at(position)

    def at(self, position: int) -> CandidateScore:
        """The candidate at ``position`` (0 <= position < len), built once."""
        made = self._made[position]
        if made is None:
            made = self._made[position] = new_candidate(
                self.ids[position], self.totals[position], self.scores_at(position))
        return made

    def as_tuple(self) -> tuple[CandidateScore, ...]:
        return tuple(map(self.at, range(len(self.ids))))

    def scores_at(self, position: int) -> dict[str, float]:
        return dict(zip(self.names, [column[position] for column in self.columns],
                        strict=True))

    def position_of(self, candidate: CandidateScore) -> int | None:
        """Where ``candidate`` (this very object) sits, or None when it is not one of ours."""
        if candidate is None:        # a picker's None: the unbuilt places hold None too
            return None
        position = self.positions().get(getattr(candidate, "worker_id", None), -1)  # type: ignore[arg-type]
        if position >= 0 and self._made[position] is candidate:
            return position
        for position, made in enumerate(self._made):
            if made is candidate:
                return position
        return None

    def scores_of(self, worker_id: str) -> dict[str, float] | None:
        """The scores of ``worker_id``, without building candidate objects."""
        position = self.positions().get(worker_id)
        return self.scores_at(position) if position is not None else None

    def positions(self) -> Mapping[str, int]:
        """Worker id -> position (the first one, should an id repeat)."""
        if self._index is None:
            index: dict[str, int] = {}
            for position, worker_id in enumerate(self.ids):
                index.setdefault(worker_id, position)
            self._index = index
        return self._index

    def ranked_order(self) -> list[int]:
        """Positions by descending total, view order on ties."""
        return sorted(range(len(self.ids)), key=self.totals.__getitem__, reverse=True)

    def runner_up(self, position: int) -> int:
        """The best other position: the highest total, the first in view order on ties
        (the candidate ranked right after ``position``, or first when it is not first)."""
        totals = self.totals
        left, right = totals[:position], totals[position + 1:]
        if not right:
            return left.index(max(left))
        if not left:
            return position + 1 + right.index(max(right))
        best_left, best_right = max(left), max(right)
        if best_left >= best_right:
            return left.index(best_left)
        return position + 1 + right.index(best_right)


class RankedCandidates(_LazySequence):
    """A table's candidates by descending total (view order on ties), sorted when read."""

    __slots__ = ("_items", "table")

    def __init__(self, table: CandidateTable) -> None:
        self.table = table
        self._items: tuple[CandidateScore, ...] | None = None

    def as_tuple(self) -> tuple[CandidateScore, ...]:
        if self._items is None:
            self._items = tuple(map(self.table.at, self.table.ranked_order()))
        return self._items

    def __len__(self) -> int:
        return len(self.table)

    @overload
    def __getitem__(self, index: int) -> CandidateScore: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[CandidateScore, ...]: ...

    def __getitem__(self, index: int | slice) -> CandidateScore | tuple[CandidateScore, ...]:
        return self.as_tuple()[index]


def scores_of(candidates: Sequence[CandidateScore], worker_id: str) -> Mapping[str, float] | None:
    """One candidate's scores; without building the others when ``candidates`` is lazy."""
    if isinstance(candidates, RankedCandidates):
        return candidates.table.scores_of(worker_id)
    if isinstance(candidates, CandidateTable):
        return candidates.scores_of(worker_id)
    for candidate in candidates:
        if candidate.worker_id == worker_id:
            return candidate.scores
    return None
