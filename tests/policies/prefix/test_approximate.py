"""The approximate prefix index: LRU per worker, reverse map, longest-prefix matching."""

from __future__ import annotations

import pytest

from policies.prefix.approximate import ApproximatePrefixIndex


def test_match_counts_leading_blocks_per_worker() -> None:
    index = ApproximatePrefixIndex(default_capacity_blocks=100)
    index.insert("w1", [1, 2, 3, 4])
    index.insert("w2", [1, 2, 9])
    assert index.match([1, 2, 3, 4, 5], ["w1", "w2", "w3"]) == {"w1": 4, "w2": 2}


def test_match_stops_at_first_miss() -> None:
    index = ApproximatePrefixIndex(default_capacity_blocks=100)
    index.insert("w1", [1, 2, 3])
    index.insert("w1", [7, 8])
    assert index.match([1, 2, 9, 10], ["w1"]) == {"w1": 2}
    assert index.match([5, 1, 2], ["w1"]) == {}
    assert index.match([7, 8, 30], ["w1"]) == {"w1": 2}


def test_match_of_branching_chains_ends_each_worker_where_its_branch_leaves() -> None:
    index = ApproximatePrefixIndex(default_capacity_blocks=1000)
    trunk = list(range(100, 160))
    index.insert("w1", trunk)                       # all 60
    index.insert("w2", [*trunk[:41], 900, 901])     # branches off after 41
    index.insert("w3", trunk[:7])                   # 7
    index.insert("w4", [5, 6, 7])                   # another chain
    assert index.match(trunk, ["w1", "w2", "w3", "w4"]) == {"w1": 60, "w2": 41, "w3": 7}
    assert index.match([*trunk, 1, 2], {"w2": 0, "w3": 1}) == {"w2": 41, "w3": 7}


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
            if rng.random() < 0.3:     # a branch of the chain: its head, then other blocks
                index.insert(worker_id, chain[:rng.randint(0, held)]
                             + [rng.getrandbits(64) for _ in range(rng.randint(1, 90))])
        if rng.random() < 0.3:
            index.remove_worker(rng.choice(workers))
        asked = rng.sample(workers, rng.randint(1, len(workers)))
        expected = _reference_match(index, chain, asked)
        assert index.match(chain, asked) == expected, trial
        # any collection of ids asks the same (the profile passes its id -> position dict)
        assert index.match(chain, dict.fromkeys(asked, 0)) == expected, trial
        assert index.match(chain, frozenset(asked)) == expected, trial


def test_what_a_worker_holds_of_a_chain_is_a_prefix_of_it_under_eviction() -> None:
    """The property ``match`` bisects on: chained inserts and LRU eviction never leave a
    worker holding a block of a chain without every block before it."""
    import random

    rng = random.Random(11)
    index = ApproximatePrefixIndex(default_capacity_blocks=150)
    trunks = [[rng.getrandbits(64) for _ in range(80)] for _ in range(6)]
    chains: list[list[int]] = []
    for step in range(600):
        trunk = rng.choice(trunks)
        chain = trunk[:rng.randint(1, len(trunk))] + [rng.getrandbits(64)
                                                      for _ in range(rng.randint(0, 40))]
        chains.append(chain)
        worker_id = f"w{rng.randrange(4)}"
        index.insert(worker_id, chain)
        if step % 97 == 0:
            index.set_capacity(worker_id, rng.randint(20, 200))
        for probe in (chain, rng.choice(chains), rng.choice(trunks)):
            for worker in ("w0", "w1", "w2", "w3"):
                held = [index.holds(worker, block) for block in probe]
                run = held.index(False) if False in held else len(held)
                assert not any(held[run:]), (step, worker)
            assert index.match(probe, ["w0", "w1", "w2", "w3"]) == _reference_match(
                index, probe, ["w0", "w1", "w2", "w3"])


def test_a_worker_that_takes_a_removed_workers_slot_inherits_none_of_its_blocks() -> None:
    index = ApproximatePrefixIndex(default_capacity_blocks=100)
    index.insert("w1", [1, 2])
    assert index.match([1, 2], ["w1"]) == {"w1": 2}
    index.remove_worker("w1")
    index.insert("w3", [7])                    # the slot w1 had
    assert index.match([1, 2], ["w1", "w3"]) == {}
    index.insert("w3", [1, 2])
    assert index.match([1, 2], ["w1", "w3"]) == {"w3": 2}
    assert index.match([1, 2], {"w3"}) == {"w3": 2}


def test_match_agrees_with_the_definition_on_fleets_of_hundreds_with_churn() -> None:
    """Holders as bit masks wider than a machine word, slots freed and reused as workers
    leave and join, caches reset, evictions: every match as the definition says."""
    import random

    rng = random.Random(5)
    index = ApproximatePrefixIndex(default_capacity_blocks=400)
    trunks = [[rng.getrandbits(64) for _ in range(120)] for _ in range(8)]
    fleet = [f"w{i}" for i in range(300)]
    joined = 300
    for step in range(1500):
        trunk = rng.choice(trunks)
        chain = trunk[:rng.randint(1, len(trunk))] + [rng.getrandbits(64)
                                                      for _ in range(rng.randint(0, 30))]
        index.insert(rng.choice(fleet), chain)
        if step % 50 == 0:            # one leaves, another joins (and takes a free slot)
            index.remove_worker(fleet.pop(rng.randrange(len(fleet))))
            fleet.append(f"w{joined}")
            joined += 1
        if step % 170 == 0:
            index.clear_worker(rng.choice(fleet))
        if step % 10 == 0:
            asked = rng.sample(fleet, rng.choice((1, 7, 60, len(fleet))))
            probe = rng.choice((chain, trunk))
            assert index.match(probe, set(asked)) == _reference_match(index, probe, asked), step


def test_insert_leaves_the_order_and_holders_of_touching_each_block_tail_first() -> None:
    """The C-level pass over a held head gives the LRU order, and the holders, of touching
    the blocks one by one, tail first; also for sequences whose held blocks are not a prefix
    (the fallback), with evictions in between."""
    import random

    from policies.prefix.approximate import WorkerBlockLru

    rng = random.Random(3)
    index = ApproximatePrefixIndex(default_capacity_blocks=60)
    others = set(range(0, 80, 3))
    index.insert("other", sorted(others))
    model = WorkerBlockLru(capacity=60)
    fallbacks = 0
    for _ in range(3000):
        blocks = [rng.randrange(80) for _ in range(rng.randint(0, 12))]
        held = len(blocks)
        while held and not index.holds("w", blocks[held - 1]):
            held -= 1
        fallbacks += not all(index.holds("w", b) for b in blocks[:held])
        for block in reversed(blocks):
            model.touch(block)
        model.evict_overflow()
        index.insert("w", blocks)
        assert index._lru("w").hashes() == model.hashes()
        # the reverse map agrees: each block's holder mask has the worker's bit
        holders, bit, other = index._holders, index._bits["w"], index._bits["other"]
        assert {b for b in range(80) if holders.get(b, 0) & bit} == set(model.hashes())
        assert {b for b in range(80) if holders.get(b, 0) & other} == others
    assert fallbacks > 100        # the block-by-block fallback ran, and agreed
