"""Decoding KV-event batches: map and tagged-array encodings, int and bytes hashes."""

from __future__ import annotations

import msgpack
import pytest

from workers.engine.api import AllBlocksCleared, BlockRemoved, BlockStored
from workers.engine.block_hash import block_hash_chain, to_event_int
from workers.kv_events.decode import KvEventDecodeError, decode_batch

TOKENS = list(range(1, 33))


def _chain() -> list[bytes]:
    return block_hash_chain(TOKENS, 16)


def test_map_encoding_of_v033() -> None:
    hashes = [to_event_int(h) for h in _chain()]
    payload = msgpack.packb([1764441000.123, [
        {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": None,
         "token_ids": TOKENS, "block_size": 16, "lora_id": None, "medium": "GPU",
         "lora_name": None, "group_idx": 0, "kv_cache_spec_kind": "full_attention"},
        {"type": "BlockRemoved", "block_hashes": hashes[:1], "medium": "GPU", "group_idx": 0},
        {"type": "AllBlocksCleared"}], 0])
    batch = decode_batch(payload)
    assert batch.ts == 1764441000.123 and batch.data_parallel_rank == 0
    assert batch.events == (
        BlockStored(block_hashes=(1403909460543360175, 1643945449041937783),
                    parent_block_hash=None, token_ids=tuple(TOKENS), block_size=16),
        BlockRemoved(block_hashes=(1403909460543360175,)),
        AllBlocksCleared())


def test_an_adapters_number_and_each_blocks_extra_keys_are_read() -> None:
    """As vLLM 0.32 sends them: ``lora_id`` and one extra-keys entry per block (null for a
    block with none), in the map and, after ``lora_name``, in the tagged array."""
    stored = {"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": None,
              "token_ids": [1] * 32, "block_size": 16, "lora_id": 2, "medium": "GPU",
              "lora_name": "sql", "extra_keys": [["sql", "abc"], ["sql"]], "group_idx": 0}
    plain = {**stored, "lora_id": None, "lora_name": None, "extra_keys": [None, None]}
    array = ["BlockStored", [1, 2], None, [1] * 32, 16, 2, "GPU", "sql", [["sql"], None]]
    events = decode_batch(msgpack.packb([1.0, [stored, plain, array], 0])).events
    assert [(e.lora_id, e.extra_keys) for e in events if isinstance(e, BlockStored)] == [
        (2, (("sql", "abc"), ("sql",))), (None, (None, None)), (2, (("sql",), None))]


def test_tagged_array_encoding_of_older_releases() -> None:
    first = to_event_int(_chain()[0])
    payload = msgpack.packb([5.0, [
        ["BlockStored", [first], None, TOKENS[:16], 16, None, "GPU"],
        ["BlockRemoved", [first], "GPU"],
        ["AllBlocksCleared"]]])
    batch = decode_batch(payload)
    assert batch.data_parallel_rank is None
    assert batch.events == (
        BlockStored(block_hashes=(first,), parent_block_hash=None,
                    token_ids=tuple(TOKENS[:16]), block_size=16),
        BlockRemoved(block_hashes=(first,)), AllBlocksCleared())


def test_oldest_array_without_medium_defaults_to_gpu() -> None:
    payload = msgpack.packb([1.0, [["BlockStored", [7], 3, [1] * 16, 16]]])
    (event,) = decode_batch(payload).events
    assert event == BlockStored(block_hashes=(7,), parent_block_hash=3,
                                token_ids=(1,) * 16, block_size=16, medium="GPU")


def test_raw_hash_bytes_become_lower_64_bits() -> None:
    chain = _chain()
    payload = msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": chain,
                                    "parent_block_hash": None, "token_ids": TOKENS,
                                    "block_size": 16}], 0])
    (event,) = decode_batch(payload).events
    assert isinstance(event, BlockStored)
    assert event.block_hashes == (1403909460543360175, 1643945449041937783)


@pytest.mark.parametrize(("payload", "message"), [
    (b"\xc1", "not msgpack"),
    (msgpack.packb(7), "batch must be"),
    (msgpack.packb(["x", []]), "number ts"),
    (msgpack.packb([1.0, [{"type": "Nope"}]]), r"events\[0\]: unknown event type 'Nope'"),
    (msgpack.packb([1.0, [{"type": "BlockRemoved", "block_hashes": "ab"}]]),
     r"events\[0\].block_hashes: expected a list"),
    (msgpack.packb([1.0, [42]]), r"events\[0\]: expected a map"),
])
def test_bad_payloads_raise_a_clear_error(payload: bytes, message: str) -> None:
    with pytest.raises(KvEventDecodeError, match=message):
        decode_batch(payload)
