"""Synthetic token blocks: deterministic, keyed by hash id, in cl100k's regular vocabulary."""

from __future__ import annotations

from sim.synthetic_tokens import (
    CL100K_REGULAR_VOCAB,
    DOMAIN_OUTPUT,
    DOMAIN_PROMPT,
    SyntheticTokens,
)

TOKENS = SyntheticTokens(0)


def test_equal_hash_ids_give_identical_prefixes_and_different_ids_differ() -> None:
    a = TOKENS.mooncake_prompt([0, 1, 2], 1100)
    b = TOKENS.mooncake_prompt([0, 1, 7], 1400)
    assert len(a) == 1100 and len(b) == 1400
    assert a[:1024] == b[:1024]
    assert a[1024:1100] != b[1024:1100]


def test_block_depends_only_on_its_id_not_its_position() -> None:
    solo = TOKENS.mooncake_prompt([42], 512)
    later = TOKENS.mooncake_prompt([5, 42], 1024)
    assert later[512:] == solo


def test_last_block_is_truncated_to_input_length() -> None:
    full = TOKENS.mooncake_prompt([9, 10], 1024)
    assert TOKENS.mooncake_prompt([9, 10], 600) == full[:600]
    assert TOKENS.mooncake_prompt([9, 10, 11], 600) == full[:600]   # extra ids unused


def test_tokens_are_in_vocabulary_distinct_across_blocks_and_seeded() -> None:
    tokens = TOKENS.mooncake_prompt(list(range(8)), 4096)
    assert min(tokens) >= 0 and max(tokens) < CL100K_REGULAR_VOCAB
    assert len(set(tokens)) > 3900                  # 4096 draws from 100,256 ids
    blocks = {tuple(TOKENS.mooncake_prompt([h], 512)) for h in range(2000)}
    assert len(blocks) == 2000
    assert SyntheticTokens(1).mooncake_prompt([0], 512) != TOKENS.mooncake_prompt([0], 512)
    assert SyntheticTokens(0).mooncake_prompt([3], 512) == TOKENS.mooncake_prompt([3], 512)


def test_streams_are_repeatable_and_domains_independent() -> None:
    assert TOKENS.stream(DOMAIN_PROMPT, 5, 300) == TOKENS.stream(DOMAIN_PROMPT, 5, 300)
    assert TOKENS.stream(DOMAIN_PROMPT, 5, 300) != TOKENS.stream(DOMAIN_OUTPUT, 5, 300)
    assert TOKENS.stream(DOMAIN_PROMPT, 5, 100) == TOKENS.stream(DOMAIN_PROMPT, 5, 300)[:100]
    assert TOKENS.stream(DOMAIN_PROMPT, 5, 0) == []
