"""LRU and optimal hit counts against their definitions, on small Mooncake-format traces."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest

from sim.cache_curve import (
    BlockAccesses,
    OptimalHits,
    block_accesses,
    capacity_for,
    curve,
    infinite_hits,
    lru_hits,
    optimal_hits,
    prefix_ceiling,
    rate,
)
from sim.traces import Trace, load_trace


def mooncake(tmp_path: Path, requests: Sequence[Sequence[int]], name: str = "m") -> Trace:
    """A Mooncake trace whose requests hold these 512-token blocks, one second apart."""
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(
        json.dumps({"timestamp": 1000 * t, "input_length": 512 * len(ids),
                    "output_length": 1, "hash_ids": list(ids)}) + "\n"
        for t, ids in enumerate(requests)))
    return load_trace(path)


def random_requests(rng: random.Random, count: int, alphabet: int,
                    longest: int) -> list[list[int]]:
    return [rng.sample(range(alphabet), rng.randint(1, longest)) for _ in range(count)]


def brute_force(accesses: BlockAccesses, capacity: int) -> tuple[int, int]:
    """The most block hits and the most prefix hits any evictions reach: every choice at
    every miss (keep the block out, or take it in, dropping any held block when full)."""
    keys = list(accesses.keys)
    first = set(accesses.starts)

    @cache
    def best(position: int, held: frozenset[int], leading: bool) -> tuple[int, int]:
        if position == len(keys):
            return 0, 0
        leading = leading or position in first
        key = keys[position]
        if key in held:
            blocks, prefix = best(position + 1, held, leading)
            return blocks + 1, prefix + leading
        options = [best(position + 1, held, False)]
        if len(held) < capacity:
            options.append(best(position + 1, held | {key}, False))
        else:
            options += [best(position + 1, (held - {out}) | {key}, False) for out in held]
        return max(o[0] for o in options), max(o[1] for o in options)

    # a request's blocks start a new leading run: ``first`` marks each request's first block
    return best(0, frozenset(), True)


def lru_by_definition(requests: Sequence[Sequence[int]], capacity: int | None) -> int:
    """Prefix-hit blocks of an LRU cache of ``capacity`` blocks (None: unbounded), by the
    definition: a request hits its leading blocks held before it; then its blocks are the
    most recently used, in order, and the least recently used beyond ``capacity`` go."""
    recency: list[int] = []              # least recently used first
    hits = 0
    for blocks in requests:
        leading = 0
        while leading < len(blocks) and blocks[leading] in recency:
            leading += 1
        hits += leading
        for block in blocks:
            if block in recency:
                recency.remove(block)
            recency.append(block)
        if capacity is not None:
            del recency[:max(0, len(recency) - capacity)]
    return hits


def test_the_lru_count_and_the_pooled_ceiling_follow_their_definition(tmp_path: Path) -> None:
    rng = random.Random(3)
    for trial in range(20):
        requests = random_requests(rng, 12, 9, 5)
        trace = mooncake(tmp_path, requests, f"t{trial}")
        accesses = block_accesses(trace)
        total = 512 * sum(map(len, requests))
        assert infinite_hits(accesses) == lru_by_definition(requests, None)
        assert prefix_ceiling(trace) == pytest.approx(512 * infinite_hits(accesses) / total)
        for blocks in (0, 1, 2, 4, 7):
            assert lru_hits(accesses, blocks) == lru_by_definition(requests, blocks)
            assert prefix_ceiling(trace, capacity_tokens=512 * blocks) == pytest.approx(
                512 * lru_by_definition(requests, blocks) / total)


def test_a_finite_pooled_cache_evicts_least_recently_used_blocks(tmp_path: Path) -> None:
    # blocks of 512 tokens: A B, then C D, then A B again
    rows = [{"timestamp": t, "input_length": 1024, "output_length": 1, "hash_ids": ids}
            for t, ids in ((0, [1, 2]), (1000, [3, 4]), (2000, [1, 2]))]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trace = load_trace(path)
    total = 3 * 1024
    assert prefix_ceiling(trace) == pytest.approx(1024 / total)
    # room for all four blocks: the same as infinite
    assert prefix_ceiling(trace, capacity_tokens=4 * 512) == pytest.approx(1024 / total)
    # room for two: C D evict A B before they come back
    assert prefix_ceiling(trace, capacity_tokens=2 * 512) == 0.0
    # a hit refreshes its block: X Y X Z X with room for two, Z evicts Y (not X)
    rows = [{"timestamp": t * 1000, "input_length": 512, "output_length": 1, "hash_ids": [i]}
            for t, i in enumerate((7, 8, 7, 9, 7))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert prefix_ceiling(load_trace(path), capacity_tokens=2 * 512) == pytest.approx(2 / 5)


def test_belady_hits_as_many_blocks_as_any_evictions_can(tmp_path: Path) -> None:
    rng = random.Random(11)
    for trial in range(40):
        trace = mooncake(tmp_path, random_requests(rng, 5, 6, 3), f"t{trial}")
        accesses = block_accesses(trace)
        for capacity in (1, 2, 3):
            most_blocks, most_prefix = brute_force(accesses, capacity)
            optimal = optimal_hits(accesses, capacity)
            assert optimal.upper == most_blocks
            assert optimal.reached <= most_prefix <= optimal.upper
            assert lru_hits(accesses, capacity) <= most_prefix


def test_belady_keeps_the_block_needed_soonest(tmp_path: Path) -> None:
    # A B, then C (room for two), then A, then B: LRU drops A for C, then B for A, and
    # loses both later hits; Belady keeps C (never needed again) out and hits both
    accesses = block_accesses(mooncake(tmp_path, [[1, 2], [3], [1], [2]]))
    assert lru_hits(accesses, 2) == 0
    assert optimal_hits(accesses, 2).upper == 2        # keeps C out: A and B both hit
    assert optimal_hits(accesses, 2).reached == 2
    assert optimal_hits(accesses, 0) == OptimalHits(reached=0, upper=0)


def test_the_capacity_found_is_the_smallest_that_reaches_the_hits(tmp_path: Path) -> None:
    rng = random.Random(5)
    trace = mooncake(tmp_path, random_requests(rng, 60, 25, 6))
    accesses = block_accesses(trace)
    best = infinite_hits(accesses)

    def lru(blocks: int) -> int:
        return lru_hits(accesses, blocks)

    def optimal(blocks: int) -> int:
        return optimal_hits(accesses, blocks).reached

    for share in (0.3, 0.6, 0.9, 1.0):
        wanted = -(-best * round(share * 100) // 100)
        for hits_at in (lru, optimal):
            found = capacity_for(hits_at, wanted, accesses.distinct_blocks)
            assert found >= 0 and hits_at(found) >= wanted
            assert found == 0 or hits_at(found - 1) < wanted
    assert capacity_for(lru, best + 1, accesses.distinct_blocks) == -1


def test_the_curve_rises_with_the_cache_and_optimal_stays_above_lru(tmp_path: Path) -> None:
    rng = random.Random(8)
    accesses = block_accesses(mooncake(tmp_path, random_requests(rng, 80, 30, 6)))
    points = curve(accesses, 512 * 10, [0.1, 0.5, 1.0, 2.0, 4.0])
    assert [p.capacity_tokens for p in points] == [512 * 1, 512 * 5, 512 * 10, 512 * 20,
                                                   512 * 40]
    ceiling = rate(accesses, infinite_hits(accesses))
    for before, after in pairwise(points):
        assert after.lru_rate >= before.lru_rate
        assert after.optimal_bound >= before.optimal_bound
    for point in points:
        assert point.lru_rate <= point.optimal_rate + 1e-12 <= point.optimal_bound + 2e-12
        assert point.optimal_bound <= ceiling + 1e-12
    assert points[-1].optimal_rate == pytest.approx(ceiling)   # 40 blocks > 30 distinct


def test_requests_without_shared_blocks_count_only_in_the_denominator(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps({"arrival_s": t, "prompt_tokens": 600,
                                        "output_tokens": 1}) + "\n" for t in range(4)))
    accesses = block_accesses(load_trace(path))
    assert list(accesses.keys) == [] and accesses.prompt_tokens == 2400
    assert infinite_hits(accesses) == 0 and rate(accesses, 0) == 0.0


def test_the_ceiling_counts_what_a_partial_last_block_reuses(tmp_path: Path) -> None:
    """Prompts of 1,500 tokens repeated (hash ids [0, 1, 2], the last block 476 tokens): in
    whole 512-token blocks the ceiling was 66 % while the engines hit 96 % of the tokens."""
    path = tmp_path / "repeat.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 2000 * k, "input_length": 1500,
                                        "output_length": 20, "hash_ids": [0, 1, 2]}) + "\n"
                            for k in range(30)))
    trace = load_trace(path)
    # every repeat reuses 1,024 + 464 tokens (29 whole 16-token blocks of the last 476)
    assert prefix_ceiling(trace) == pytest.approx(29 * (1024 + 464) / (30 * 1500))
    # a shorter repeat reuses its own blocks, never more than it has
    shorter = tmp_path / "shorter.jsonl"
    shorter.write_text(json.dumps({"timestamp": 0, "input_length": 1500, "output_length": 1,
                                   "hash_ids": [0, 1, 2]}) + "\n"
                       + json.dumps({"timestamp": 1, "input_length": 1100, "output_length": 1,
                                     "hash_ids": [0, 1, 2]}) + "\n")
    assert prefix_ceiling(load_trace(shorter)) == pytest.approx((1024 + 64) / 2600)
