"""policies/candidate_index.py: ids and positions built once per fleet, shared per decision."""

from __future__ import annotations

import dataclasses

from policies.base import CycleState
from policies.candidate_index import (
    CandidateIndex,
    CandidateIndexCache,
    candidate_index,
    share_index,
)
from tests.policies.conftest import make_view


def test_index_holds_ids_and_positions_in_view_order() -> None:
    views = [make_view("b"), make_view("a"), make_view("c")]
    index = CandidateIndex([v.info for v in views])
    assert index.ids == ["b", "a", "c"]
    assert index.position == {"b": 0, "a": 1, "c": 2}
    assert len(index) == 3


def test_a_repeated_id_keeps_its_first_position_as_list_index_does() -> None:
    views = [make_view("a"), make_view("b"), make_view("a")]
    index = CandidateIndex([v.info for v in views])
    assert index.position == {"a": 0, "b": 1}


def test_cache_reuses_the_index_while_the_views_carry_the_same_infos() -> None:
    cache = CandidateIndexCache()
    views = [make_view("a"), make_view("b")]
    first = cache.index(views)
    rebuilt = [dataclasses.replace(v, running=7) for v in views]   # new views, same infos
    assert cache.index(rebuilt) is first
    reordered = [rebuilt[1], rebuilt[0]]
    second = cache.index(reordered)
    assert second is not first and second.ids == ["b", "a"]
    assert cache.index(reordered[:1]).ids == ["b"]


def test_plugins_get_the_shared_index_only_for_the_very_list_it_describes() -> None:
    views = [make_view("a"), make_view("b")]
    cycle = CycleState()
    shared = CandidateIndex([v.info for v in views])
    share_index(cycle, views, shared)
    assert candidate_index(cycle, views) is shared
    copy = list(views)
    own = candidate_index(cycle, copy)
    assert own is not shared and own.ids == ["a", "b"]
    assert candidate_index(cycle, copy) is own      # shared for the rest of the decision
