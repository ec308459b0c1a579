"""Columnar candidates: the same objects, order and scores as the eager tuple they replace."""

from __future__ import annotations

import pickle
import random

from policies.base import CandidateScore
from policies.candidates import CandidateTable, RankedCandidates, scores_of


def _table() -> CandidateTable:
    return CandidateTable(["a", "b", "c", "d"], [0.5, 1.5, 0.5, 1.5], ["q", "kv"],
                          [[0.1, 0.9, 0.2, 0.8], [0.4, 0.6, 0.3, 0.7]])


def test_each_position_is_built_once_with_its_scores() -> None:
    table = _table()
    first = table[1]
    assert first == CandidateScore("b", 1.5, {"q": 0.9, "kv": 0.6})
    assert table[1] is first
    assert table[-1] == CandidateScore("d", 1.5, {"q": 0.8, "kv": 0.7})
    assert table.position_of(first) == 1
    assert table.position_of(CandidateScore("b", 1.5, {"q": 0.9, "kv": 0.6})) is None
    assert [c.worker_id for c in table] == ["a", "b", "c", "d"]
    assert table[1:3] == (table[1], table[2])


def test_ranked_is_a_stable_descending_sort_equal_to_the_tuple() -> None:
    table = _table()
    ranked = RankedCandidates(table)
    eager = tuple(sorted(table, key=lambda c: c.total, reverse=True))
    assert [c.worker_id for c in ranked] == ["b", "d", "a", "c"]
    assert ranked == eager
    assert eager == ranked
    assert ranked[0] is table[1]
    assert len(ranked) == 4


def test_runner_up_is_the_next_ranked_candidate() -> None:
    rng = random.Random(3)
    for _ in range(300):
        count = rng.randint(2, 8)
        totals = [float(rng.randint(0, 3)) for _ in range(count)]
        table = CandidateTable([f"w{i}" for i in range(count)], totals, [], [])
        ranked = sorted(range(count), key=totals.__getitem__, reverse=True)
        for chosen in range(count):
            expected = ranked[1] if ranked[0] == chosen else ranked[0]
            assert table.runner_up(chosen) == expected


def test_pickles_as_a_plain_tuple() -> None:
    ranked = RankedCandidates(_table())
    restored = pickle.loads(pickle.dumps(ranked))
    assert type(restored) is tuple
    assert restored == ranked


def test_scores_of_reads_one_candidate_without_building_the_rest() -> None:
    table = _table()
    ranked = RankedCandidates(table)
    assert scores_of(ranked, "c") == {"q": 0.2, "kv": 0.3}
    assert scores_of(ranked, "zz") is None
    assert all(made is None for made in table._made)
    assert scores_of((CandidateScore("x", 1.0, {"s": 1.0}),), "x") == {"s": 1.0}
