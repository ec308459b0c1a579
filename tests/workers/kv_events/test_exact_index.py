"""Exact per-worker block sets: apply in order, gaps, replays, restarts, clears."""

from __future__ import annotations

from workers.engine.api import AllBlocksCleared, BlockRemoved, BlockStored
from workers.kv_events.decode import KvEventBatch
from workers.kv_events.exact_index import ExactPrefixIndex


def stored(*hashes: int, medium: str = "GPU") -> KvEventBatch:
    return KvEventBatch(ts=0.0, events=(BlockStored(
        block_hashes=hashes, parent_block_hash=None, token_ids=(), block_size=16,
        medium=medium),))


def removed(*hashes: int) -> KvEventBatch:
    return KvEventBatch(ts=0.0, events=(BlockRemoved(block_hashes=hashes),))


def test_in_order_batches_build_the_block_set() -> None:
    index = ExactPrefixIndex()
    assert index.on_batch("w", 0, stored(1, 2, 3)) is None
    assert index.on_batch("w", 1, removed(3)) is None
    assert index.is_exact("w")
    assert index.match("w", [1, 2, 3]) == 2
    assert index.match("w", [2, 1]) == 2
    assert index.match("w", [9]) == 0


def test_unknown_worker_is_not_exact() -> None:
    assert ExactPrefixIndex().match("nobody", [1]) is None


def test_cpu_medium_blocks_are_not_device_hits() -> None:
    index = ExactPrefixIndex()
    index.on_batch("w", 0, stored(5, medium="CPU"))
    assert index.match("w", [5]) == 0


def test_gap_makes_worker_inexact_and_replay_restores_it() -> None:
    index = ExactPrefixIndex()
    index.on_batch("w", 0, stored(1))
    assert index.on_batch("w", 2, stored(3)) == 1        # replay from 1
    assert not index.is_exact("w") and index.match("w", [1]) is None
    assert index.on_batch("w", 3, removed(1)) is None    # held, no second replay request
    # the replay delivers 1..3; 2 and 3 are already held
    index.on_batch("w", 1, stored(2))
    index.on_batch("w", 2, stored(3))
    index.on_replay_done("w")
    assert index.is_exact("w")
    assert index.match("w", [2, 3]) == 2 and index.match("w", [1]) == 0
    assert index.state("w").last_seq == 3 and index.state("w").gaps == 1


def test_unfilled_gap_applies_held_batches_and_stays_inexact_until_cleared() -> None:
    index = ExactPrefixIndex()
    index.on_batch("w", 0, stored(1))
    assert index.on_batch("w", 5, stored(6)) == 1
    index.on_replay_done("w")
    assert not index.is_exact("w") and index.holds("w", 6)
    index.on_batch("w", 6, KvEventBatch(ts=0.0, events=(AllBlocksCleared(),)))
    index.on_batch("w", 7, stored(8))
    assert index.is_exact("w") and index.match("w", [8]) == 1 and index.blocks("w") == 1


def test_a_router_that_joins_a_running_engine_is_exact_from_its_first_batch() -> None:
    """A router restarted (or a replica added) while the engine served saw seq 7 first: it
    asked for a replay from 0, none came (no replay endpoint), and the worker stayed inexact
    for good, silently. What precedes the join is history, not a loss."""
    index = ExactPrefixIndex()
    assert index.on_batch("w", 7, stored(1, 2)) == 0
    index.on_batch("w", 8, stored(3))
    index.on_batch("w", 9, removed(99))                  # a block stored before the join
    index.on_replay_done("w")                            # no replay came
    assert index.is_exact("w") and index.match("w", [1, 2, 3]) == 3
    assert index.state("w").last_seq == 9
    # a hole among the held batches is a loss, late join or not
    late = ExactPrefixIndex()
    late.on_batch("w", 7, stored(1))
    late.on_batch("w", 9, stored(2))
    late.on_replay_done("w")
    assert not late.is_exact("w")


def test_first_batch_after_zero_asks_for_replay_from_zero() -> None:
    index = ExactPrefixIndex()
    assert index.on_batch("w", 4, stored(4)) == 0
    assert not index.is_exact("w")
    for seq in range(4):
        index.on_batch("w", seq, stored(seq))
    index.on_replay_done("w")
    assert index.is_exact("w") and index.match("w", [0, 1, 2, 3, 4]) == 5


def test_publisher_restart_clears_the_set() -> None:
    index = ExactPrefixIndex()
    index.on_batch("w", 0, stored(1))
    index.on_batch("w", 1, stored(2))
    index.on_batch("w", 0, stored(7))                   # seq went back to 0
    assert index.is_exact("w")
    assert index.match("w", [1]) == 0 and index.match("w", [7]) == 1


def test_duplicates_are_ignored() -> None:
    index = ExactPrefixIndex()
    index.on_batch("w", 0, stored(1))
    index.on_batch("w", 1, removed(1))
    index.on_batch("w", 1, stored(1))
    assert index.match("w", [1]) == 0


def test_a_stream_that_overflows_the_bound_is_distrusted() -> None:
    index = ExactPrefixIndex(max_blocks_per_worker=3)
    index.on_batch("w", 0, stored(1, 2, 3, 4))
    assert not index.is_exact("w") and index.blocks("w") == 0


def test_in_process_events_keep_the_worker_exact() -> None:
    index = ExactPrefixIndex()
    index.apply_events("w", [BlockStored(block_hashes=(1, 2), parent_block_hash=None,
                                         token_ids=(), block_size=16)])
    index.apply_events("w", [BlockRemoved(block_hashes=(2,))])
    assert index.is_exact("w") and index.match("w", [1, 2]) == 1


def test_held_blocks_are_not_walked_by_the_garbage_collector() -> None:
    """A full collection walks every tracked container's items; a worker's blocks, removals
    included, stay in a container the collector leaves untracked."""
    import gc

    index = ExactPrefixIndex()
    hashes = [(1 << 40) + n for n in range(5000)]
    assert index.on_batch("w", 0, stored(*hashes)) is None
    assert index.on_batch("w", 1, removed(*hashes[2500:], 12345)) is None   # 12345: unknown
    gc.collect()
    assert index.blocks("w") == 2500 and index.match("w", hashes) == 2500
    blocks = index._workers["w"].blocks
    assert not gc.is_tracked(blocks)


def test_a_forgotten_worker_starts_again_from_its_next_batch() -> None:
    """Its engine went down or restarted: its old blocks must not be matched meanwhile."""
    index = ExactPrefixIndex()
    index.on_batch("w", 0, stored(1, 2))
    index.on_batch("w", 1, stored(3))
    index.forget("w")
    assert not index.is_exact("w") and index.match("w", [1]) is None and index.blocks("w") == 0
    index.on_batch("w", 0, stored(7))                  # the restarted engine's first batch
    assert index.is_exact("w") and index.match("w", [1]) == 0 and index.match("w", [7]) == 1
    index.forget("w")
    assert index.on_batch("w", 5, stored(8)) == 0      # the same engine, back from a blip
    index.on_replay_done("w")                          # a late join: exact from there
    assert index.is_exact("w") and index.match("w", [8]) == 1
    index.forget("unknown")                            # nothing to drop
