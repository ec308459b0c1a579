"""Synthetic token blocks: deterministic, keyed by hash id, in cl100k's regular vocabulary."""

from __future__ import annotations

from sim.synthetic_tokens import (
    CL100K_REGULAR_VOCAB,
    DOMAIN_OUTPUT,
    DOMAIN_PROMPT,
    mooncake_prompt,
    token_stream,
)


def test_equal_hash_ids_give_identical_prefixes_and_different_ids_differ() -> None:
    a = mooncake_prompt(0, [0, 1, 2], 1100)
    b = mooncake_prompt(0, [0, 1, 7], 1400)
    assert len(a) == 1100 and len(b) == 1400
    assert a[:1024] == b[:1024]
    assert a[1024:1100] != b[1024:1100]


def test_block_depends_only_on_its_id_not_its_position() -> None:
    solo = mooncake_prompt(0, [42], 512)
    later = mooncake_prompt(0, [5, 42], 1024)
    assert later[512:] == solo


def test_last_block_is_truncated_to_input_length() -> None:
    full = mooncake_prompt(3, [9, 10], 1024)
    short = mooncake_prompt(3, [9, 10], 600)
    assert short == full[:600]


def test_tokens_are_in_vocabulary_and_seed_changes_them() -> None:
    tokens = mooncake_prompt(0, list(range(8)), 4096)
    assert min(tokens) >= 0 and max(tokens) < CL100K_REGULAR_VOCAB
    assert len(set(tokens)) > 3500          # no degenerate repetition
    assert mooncake_prompt(1, [0], 512) != mooncake_prompt(0, [0], 512)


def test_streams_are_repeatable_and_domains_independent() -> None:
    assert token_stream(0, DOMAIN_PROMPT, 5, 100) == token_stream(0, DOMAIN_PROMPT, 5, 100)
    assert token_stream(0, DOMAIN_PROMPT, 5, 100) != token_stream(0, DOMAIN_OUTPUT, 5, 100)
    assert token_stream(0, DOMAIN_PROMPT, 5, 0) == []
