"""Block hashes against vLLM's published test vectors (vllm-interface.md §4.1)."""

from __future__ import annotations

import hashlib
import pickle
import subprocess
import sys

import pytest

from workers.engine.block_hash import (
    block_hash_chain,
    get_hash_function,
    hash_block_tokens,
    none_hash,
    to_event_int,
)

NONE_HASH_HEX = "066b1e8987e027138e98701c46128929378935f9b6cd1549105ae6b4f0d71198"
NONE_HASH_SEED0_HEX = "1973e23848344dc43a988a9b478663803cfffe1243480253f9a3cf004b14aa7c"
LORA_KEYS = (("lora", "my-adapter", "/adapters/my-adapter"),)


def test_none_hash_matches_vllm_fixed_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    assert none_hash().hex() == NONE_HASH_HEX


def test_none_hash_uses_pythonhashseed_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    assert none_hash().hex() == NONE_HASH_SEED0_HEX


def test_explicit_seed_wins_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    assert none_hash(seed="vllm-none-hash").hex() == NONE_HASH_HEX


def test_chain_of_two_blocks_matches_event_ints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    hashes = block_hash_chain(list(range(1, 33)), 16)
    assert hashes[0].hex().startswith("7b255da4") and hashes[0].hex().endswith("547f4caf")
    assert hashes[1].hex().startswith("8e717bec") and hashes[1].hex().endswith("0843c577")
    assert [to_event_int(h) for h in hashes] == [1403909460543360175, 1643945449041937783]


def test_partial_trailing_block_is_not_hashed() -> None:
    assert len(block_hash_chain(list(range(1, 48)), 16)) == 2
    assert block_hash_chain(list(range(15)), 16) == []


def test_lora_extra_keys_vector(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    block0 = hash_block_tokens(none_hash(), range(1, 17), LORA_KEYS)
    assert to_event_int(block0) == 944037498893709900
    assert block_hash_chain(list(range(1, 17)), 16, extra_keys=LORA_KEYS) == [block0]


def test_hash_is_sha256_of_pickle_protocol_5() -> None:
    parent = none_hash(seed="s")
    expected = hashlib.sha256(
        pickle.dumps((parent, (5, 6), None), protocol=5)).digest()
    assert hash_block_tokens(parent, [5, 6]) == expected


def test_cache_salt_changes_only_block_zero_key() -> None:
    tokens = list(range(32))
    plain = block_hash_chain(tokens, 16)
    salted = block_hash_chain(tokens, 16, cache_salt="tenant-a")
    expected0 = hash_block_tokens(none_hash(), tokens[:16], (("cache_salt", "tenant-a"),))
    assert salted[0] == expected0 != plain[0]
    assert salted[1] == hash_block_tokens(salted[0], tokens[16:])


@pytest.mark.parametrize("algo", ["sha256", "builtin"])
def test_a_chain_continued_from_a_parent_equals_the_whole_chain(algo: str) -> None:
    tokens = list(range(100, 180))
    whole = block_hash_chain(tokens, 16, algo=algo, seed="s", cache_salt="t")
    rest = block_hash_chain(tokens[32:], 16, algo=algo, seed="other", cache_salt="t",
                            parent=whole[1])
    assert whole[2:] == rest


def test_sha256_cbor_is_sha256_of_canonical_cbor() -> None:
    cbor2 = pytest.importorskip("cbor2")
    parent = none_hash("sha256_cbor")
    assert parent == hashlib.sha256(cbor2.dumps("vllm-none-hash", canonical=True)).digest()
    block = hash_block_tokens(parent, [1, 2, 3], None, algo="sha256_cbor")
    assert block == hashlib.sha256(
        cbor2.dumps((parent, (1, 2, 3), None), canonical=True)).digest()
    assert block != hash_block_tokens(parent, [1, 2, 3])


def test_builtin_is_eight_bytes_chained_and_deterministic_across_processes() -> None:
    hashes = block_hash_chain(list(range(64)), 16, algo="builtin", seed="s")
    assert len(hashes) == 4 and all(len(h) == 8 for h in hashes)
    assert hashes[1] == hash_block_tokens(hashes[0], range(16, 32), algo="builtin")
    code = ("from workers.engine.block_hash import block_hash_chain;"
            "print(block_hash_chain(list(range(64)), 16, algo='builtin', seed='s')[3].hex())")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "12345"})
    assert other.stdout.strip() == hashes[3].hex()


def test_unknown_algo_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match="unknown hash algo 'md5'"):
        get_hash_function("md5")
    with pytest.raises(ValueError, match="block_size must be positive"):
        block_hash_chain([1], 0)
