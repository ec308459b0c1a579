"""The prefix hash memo: fingerprints of prefixes, leading lookups, two bounded generations."""

from __future__ import annotations

from array import array

from policies.producers.hash_memo import PrefixHashMemo, fingerprints


def test_fingerprints_cover_whole_prefixes() -> None:
    tokens = list(range(50))
    prints = fingerprints(tokens, 16)
    assert len(prints) == 3                                  # the partial block has none
    assert fingerprints(tokens[:32] + [0] * 16, 16)[:2] == prints[:2]
    assert fingerprints(tokens[:32] + [0] * 16, 16)[2] != prints[2]
    changed_first = [99, *tokens[1:]]
    assert all(a != b for a, b in zip(fingerprints(changed_first, 16), prints, strict=True))
    assert fingerprints(tuple(tokens), 16) == prints
    assert fingerprints(tokens, 8)[1] != prints[0]           # block size is part of it


def test_a_token_array_and_a_client_list_of_the_same_ids_share_fingerprints() -> None:
    tokens = [0, 1, 2**31 - 1, 100_000, *range(60)]
    assert fingerprints(array("i", tokens), 16) == fingerprints(tokens, 16)
    assert len(fingerprints(array("i", tokens), 16)) == 4
    # the buffer is read whole blocks at a time: a change in any id of a block changes it
    for position in range(64):
        changed = [*tokens]
        changed[position] += 1
        moved = fingerprints(changed, 16)
        assert moved[:position // 16] == fingerprints(tokens, 16)[:position // 16]
        assert moved[position // 16] != fingerprints(tokens, 16)[position // 16]


def test_ids_beyond_32_bits_are_fingerprinted_as_ints_and_still_cover_whole_prefixes() -> None:
    tokens = [2**40 + i for i in range(50)]
    prints = fingerprints(tokens, 16)
    assert len(prints) == 3
    assert fingerprints(tokens[:32] + [-1] * 16, 16)[:2] == prints[:2]
    assert fingerprints(tokens[:32] + [-1] * 16, 16)[2] != prints[2]
    assert fingerprints(tuple(tokens), 16) == prints


def test_leading_stops_at_the_first_block_not_held() -> None:
    memo = PrefixHashMemo(max_blocks=100)
    memo.store([1, 2, 3], [10, 20, 30])
    memo.store([5], [50])
    assert memo.leading([1, 2, 3, 4, 5]) == [10, 20, 30]
    assert memo.leading([2, 1]) == [20, 10]
    assert memo.leading([4, 1]) == []
    assert memo.looked_up == 5 and memo.hashed == 4


def test_two_generations_keep_what_was_used_since_the_last_turnover() -> None:
    memo = PrefixHashMemo(max_blocks=4)        # two generations of two
    memo.store([1, 2], [10, 20])
    memo.store([3], [30])                      # turnover: {1, 2} become the old generation
    assert memo.leading([1]) == [10]           # used again: copied to the young one
    memo.store([4], [40])                      # turnover: {3, 1} old, {2} dropped
    assert memo.leading([2]) == [] and memo.leading([3]) == [30]
    assert memo.leading([1]) == [10] and len(memo) <= 4


def test_a_chain_longer_than_a_generation_keeps_its_leading_blocks() -> None:
    memo = PrefixHashMemo(max_blocks=6)
    memo.store(list(range(10)), list(range(100, 110)))
    assert len(memo) == 3 and memo.leading(list(range(10))) == [100, 101, 102]
    assert memo.hashed == 3


def test_a_memo_of_zero_blocks_holds_nothing() -> None:
    memo = PrefixHashMemo(max_blocks=0)
    memo.store([1], [10])
    assert len(memo) == 0 and memo.leading([1]) == []
