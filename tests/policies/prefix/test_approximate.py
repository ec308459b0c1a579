"""The approximate prefix index: LRU per worker, reverse map, longest-prefix matching."""

from __future__ import annotations

import pytest

from policies.prefix.approximate import ApproximatePrefixIndex


def test_match_counts_leading_blocks_per_worker() -> None:
    index = ApproximatePrefixIndex(default_capacity_blocks=100)
    index.insert("w1", [1, 2, 3, 4])
    index.insert("w2", [1, 2, 9])
    assert index.match([1, 2, 3, 4, 5], ["w1", "w2", "w3"]) == {"w1": 4, "w2": 2}


def test_match_stops_at_first_miss_even_if_later_blocks_are_held() -> None:
    index = ApproximatePrefixIndex(default_capacity_blocks=100)
    index.insert("w1", [1, 2, 3])
    index.insert("w1", [7, 8])
    assert index.match([1, 9, 3], ["w1"]) == {"w1": 1}
    assert index.match([5, 1, 2], ["w1"]) == {}


def test_match_only_reports_requested_workers() -> None:
    index = ApproximatePrefixIndex(default_capacity_blocks=100)
    index.insert("w1", [1, 2])
    index.insert("w2", [1, 2])
    assert index.match([1, 2], ["w2"]) == {"w2": 2}


def test_lru_evicts_tail_blocks_of_a_request_before_its_head() -> None:
    index = ApproximatePrefixIndex(default_capacity_blocks=4)
    index.insert("w1", [1, 2, 3])
    index.insert("w1", [10, 11])          # 5 blocks > 4: the least recent goes
    # chain [1, 2, 3] was touched tail first, so block 3 is the oldest and is evicted
    assert not index.holds("w1", 3)
    assert index.holds("w1", 1) and index.holds("w1", 2)
    assert index.match([1, 2, 3], ["w1"]) == {"w1": 2}
    assert index.blocks("w1") == 4


def test_capacity_comes_from_num_gpu_blocks_less_the_null_block() -> None:
    index = ApproximatePrefixIndex(default_capacity_blocks=100)
    index.insert("w1", list(range(50)))
    index.set_capacity("w1", num_gpu_blocks=11)
    assert index.capacity("w1") == 10
    assert index.blocks("w1") == 10
    assert index.match(list(range(50)), ["w1"]) == {"w1": 10}   # the head survived


def test_memory_stays_bounded_under_unbounded_unique_traffic() -> None:
    index = ApproximatePrefixIndex(default_capacity_blocks=64)
    for start in range(0, 100_000, 16):
        index.insert("w1", list(range(start, start + 16)))
        index.insert("w2", list(range(start + 8, start + 24)))
    assert index.blocks("w1") == 64 and index.blocks("w2") == 64
    assert index.distinct_blocks() <= 128


def test_reverse_map_forgets_evicted_and_removed_workers() -> None:
    index = ApproximatePrefixIndex(default_capacity_blocks=2)
    index.insert("w1", [1, 2])
    index.insert("w2", [1])
    index.insert("w1", [3, 4])            # evicts 1 and 2 from w1
    assert index.match([1], ["w1", "w2"]) == {"w2": 1}
    index.remove_worker("w2")
    assert index.match([1], ["w1", "w2"]) == {}
    assert index.distinct_blocks() == 2


def test_clear_worker_keeps_capacity() -> None:
    index = ApproximatePrefixIndex(default_capacity_blocks=100)
    index.set_capacity("w1", 9)
    index.insert("w1", [1, 2])
    index.clear_worker("w1")
    assert index.blocks("w1") == 0 and index.capacity("w1") == 8
    assert index.match([1, 2], ["w1"]) == {}


def test_rejects_zero_default_capacity() -> None:
    with pytest.raises(ValueError, match="default_capacity_blocks"):
        ApproximatePrefixIndex(default_capacity_blocks=0)


def _reference_match(index: ApproximatePrefixIndex, chain: list[int],
                     worker_ids: list[str]) -> dict[str, int]:
    """The definition: per worker, the leading blocks it holds, up to its first miss."""
    result = {}
    for worker_id in worker_ids:
        blocks = 0
        while blocks < len(chain) and index.holds(worker_id, chain[blocks]):
            blocks += 1
        if blocks:
            result[worker_id] = blocks
    return result


def test_match_agrees_with_the_definition_on_random_fleets_and_long_chains() -> None:
    import random

    rng = random.Random(3)
    for trial in range(150):
        # small capacities in some trials: evictions shrink shared blocks back to one holder
        index = ApproximatePrefixIndex(default_capacity_blocks=rng.choice((40, 300, 10_000)))
        chain = [rng.getrandbits(64) for _ in range(rng.choice((1, 5, 63, 64, 65, 200, 700)))]
        workers = [f"w{i}" for i in range(rng.randint(1, 12))]
        for worker_id in workers:
            held = rng.randint(0, len(chain))
            index.insert(worker_id, chain[:held])
            if rng.random() < 0.3 and held < len(chain):   # a later block held past a miss
                index.insert(worker_id, chain[rng.randrange(held, len(chain)):][:3])
        if rng.random() < 0.3:
            index.remove_worker(rng.choice(workers))
        asked = rng.sample(workers, rng.randint(1, len(workers)))
        expected = _reference_match(index, chain, asked)
        assert index.match(chain, asked) == expected, trial
        # any collection of ids asks the same (the profile passes its id -> position dict)
        assert index.match(chain, dict.fromkeys(asked, 0)) == expected, trial
        assert index.match(chain, frozenset(asked)) == expected, trial
