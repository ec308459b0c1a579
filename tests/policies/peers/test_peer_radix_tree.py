from __future__ import annotations

from policies.peers.radix_tree import ApproxRadixTree


def test_split_edges_keep_both_branches_and_size() -> None:
    tree = ApproxRadixTree()
    tree.insert([1, 2, 3, 4, 5], 0.0)
    tree.insert([1, 2, 3, 9], 1.0)
    assert tree.size == 6                          # 1 2 3 | 4 5 | 9
    assert tree.match_length([1, 2, 3, 4, 5, 6], 2.0) == 5
    assert tree.match_length([1, 2, 3, 9, 9], 2.0) == 4
    assert tree.match_length([1, 2, 7], 2.0) == 2
    assert tree.match_length([5], 2.0) == 0
    tree.insert([1, 2, 3, 4, 5], 3.0)              # already present: nothing grows
    assert tree.size == 6


def test_partial_match_inside_a_long_edge() -> None:
    tree = ApproxRadixTree()
    tree.insert(list(range(1000)), 0.0)
    query = [*range(737), -1]
    assert tree.match_length(query, 1.0) == 737


def test_evict_removes_lru_leaves_then_newly_bare_parents() -> None:
    tree = ApproxRadixTree()
    tree.insert([1, 2, 3], 0.0)        # branch a (leaf 3 after split)
    tree.insert([1, 2, 4], 5.0)        # branch b
    tree.insert([7, 8], 2.0)           # separate leaf
    assert tree.size == 6              # [1 2] [3] [4] [7 8]
    assert tree.evict_to(5) == 1       # oldest leaf: [3] (t=0; parent touched at 5)
    assert tree.match_length([1, 2, 3], 6.0) == 2
    assert tree.evict_to(2) == 3       # [7 8] (t=2), then [4] (t=5): size 2
    assert tree.size == 2
    assert tree.match_length([1, 2, 4], 7.0) == 2
    assert tree.evict_to(0) == 2
    assert tree.size == 0
