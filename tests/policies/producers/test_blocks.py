"""The blocks producer: vLLM's chained hashes at every worker block size, cached."""

from __future__ import annotations

import gc
from array import array
from concurrent.futures import ThreadPoolExecutor

import pytest

from policies.base import RoutingRequest
from policies.errors import ParamError
from policies.producers.blocks import BlocksParams, BlocksProducer
from tests.policies.conftest import make_view
from workers.engine.block_hash import block_hash_chain, to_event_int


def request_with(tokens: list[int]) -> RoutingRequest:
    request = RoutingRequest(request_id="r", model="m")
    request.prompt_token_ids = tokens
    request.num_prompt_tokens = len(tokens)
    return request


def test_hashes_equal_vllm_event_ints_for_each_block_size() -> None:
    producer = BlocksProducer("blocks", BlocksParams())
    tokens = list(range(1, 41))
    request = request_with(tokens)
    producer.produce(request, [make_view("a", block_size=16), make_view("b", block_size=8),
                               make_view("c", block_size=16)])
    assert sorted(request.block_hashes) == [8, 16]
    assert list(request.block_hashes[16]) == [1403909460543360175, 1643945449041937783]
    assert list(request.block_hashes[8]) == [
        to_event_int(h) for h in block_hash_chain(tokens, 8)]


def test_an_adapters_prompt_is_hashed_with_vllms_lora_key() -> None:
    """vLLM hashes ``("lora", name, path)`` into every block of an adapter's request: the
    router hashed without it, so the same prompt under the base model and under an adapter
    counted as one cached prefix (a false hit), and an adapter's own blocks, as its worker's
    KV events published them, were never found."""
    producer = BlocksProducer("blocks", BlocksParams())
    views = [make_view("a"), make_view("b", lora_adapters=("my-adapter", "other"),
                                       lora_paths=(("my-adapter", "/adapters/my-adapter"),))]
    tokens = list(range(1, 33))
    chains = {}
    for model in ("m", "my-adapter", "other", "my-adapter"):     # the memo, twice
        request = request_with(tokens)
        request.model = "meta-llama/Llama-3.1-8B-Instruct" if model == "m" else model
        producer.produce(request, views)
        chains.setdefault(model, []).append(list(request.block_hashes[16]))
    assert chains["m"][0] == [1403909460543360175, 1643945449041937783]
    assert chains["my-adapter"][0][0] == 944037498893709900        # vLLM's test vector
    assert chains["my-adapter"][0] == chains["my-adapter"][1] == [to_event_int(h) for h in (
        block_hash_chain(tokens, 16, extra_keys=(("lora", "my-adapter",
                                                  "/adapters/my-adapter"),)))]
    # an adapter whose card has no path is keyed by its name, as the emulator keys it
    assert chains["other"][0] == [to_event_int(h) for h in block_hash_chain(
        tokens, 16, extra_keys=(("lora", "other", "other"),))]
    assert len({tuple(chain[0]) for chain in chains.values()}) == 3


def test_an_alias_of_an_adapter_is_hashed_as_the_adapter() -> None:
    """A rule ``when: {model: sql}, then: {adapter: my-adapter}`` runs after the producers:
    its requests were hashed as the base model's, so they were routed on the base model's
    cached blocks (which the engine does not share with the adapter) and recorded as such."""
    from policies.producers.served_model import ALIAS_TARGET

    producer = BlocksProducer("blocks", BlocksParams())
    views = [make_view("b", lora_adapters=("my-adapter",),
                       lora_paths=(("my-adapter", "/adapters/my-adapter"),))]
    tokens = list(range(1, 33))
    named = request_with(tokens)
    named.model = "my-adapter"
    producer.produce(named, views)
    aliased = request_with(tokens)
    aliased.model = "sql"
    aliased.attributes[ALIAS_TARGET] = "my-adapter"
    producer.produce(aliased, views)
    assert list(aliased.block_hashes[16]) == list(named.block_hashes[16]) == [
        to_event_int(h) for h in block_hash_chain(
            tokens, 16, extra_keys=(("lora", "my-adapter", "/adapters/my-adapter"),))]


def test_seed_and_algorithm_are_the_workers() -> None:
    producer = BlocksProducer("blocks", BlocksParams(algo="sha256_cbor", seed="0"))
    tokens = list(range(1, 33))
    request = request_with(tokens)
    producer.produce(request, [make_view("a")])
    assert list(request.block_hashes[16]) == [
        to_event_int(h) for h in block_hash_chain(tokens, 16, algo="sha256_cbor", seed="0")]


def reference(tokens: list[int], block_size: int = 16, **kwargs: str) -> array[int]:
    return array("Q", [to_event_int(h) for h in block_hash_chain(tokens, block_size, **kwargs)])


def test_a_chain_is_one_buffer_the_garbage_collector_does_not_walk() -> None:
    # a tuple of 128 ints would make the next young collection visit each int
    chain = BlocksProducer("blocks", BlocksParams()).chain(list(range(16 * 128)), 16)
    assert len(chain) == 128
    assert not [ref for ref in gc.get_referents(chain) if isinstance(ref, int)]
    assert chain == reference(list(range(16 * 128)))


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor", "builtin"])
def test_a_prompt_extending_one_seen_hashes_only_its_new_blocks(algo: str) -> None:
    producer = BlocksProducer("blocks", BlocksParams(algo=algo, seed="7"))
    first = list(range(1000, 1000 + 16 * 5 + 3))
    turn = first + list(range(5000, 5000 + 16 * 3))
    assert producer.chain(first, 16) == reference(first, algo=algo, seed="7")
    memo = producer.memos[16]
    assert (memo.looked_up, memo.hashed) == (0, 5)
    # the next turn: 5 blocks found, then the partial block of the first turn is completed
    assert producer.chain(turn, 16) == reference(turn, algo=algo, seed="7")
    assert (memo.looked_up, memo.hashed) == (5, 5 + 3)
    diverged = first[:40] + [7] * 40       # shares 2 whole blocks, then differs
    assert producer.chain(diverged, 16) == reference(diverged, algo=algo, seed="7")
    assert (memo.looked_up, memo.hashed) == (5 + 2, 8 + 3)
    assert producer.chain(first[:35], 16) == reference(first[:35], algo=algo, seed="7")
    assert (memo.looked_up, memo.hashed) == (9, 11)


def test_token_arrays_hash_as_lists_do() -> None:
    producer = BlocksProducer("blocks", BlocksParams())
    tokens = list(range(300, 380))
    request = RoutingRequest(request_id="r", model="m")
    request.prompt_token_ids = array("i", tokens)       # what the tokens producer sets
    request.num_prompt_tokens = len(tokens)
    producer.produce(request, [make_view("a", block_size=16), make_view("b", block_size=32)])
    assert request.block_hashes[16] == reference(tokens, 16)
    assert request.block_hashes[32] == reference(tokens, 32)


def test_client_ids_beyond_32_bits_hash_exactly_and_are_found_again() -> None:
    producer = BlocksProducer("blocks", BlocksParams())
    tokens = [2**40 + i for i in range(16 * 4)]
    assert producer.chain(tokens, 16) == reference(tokens)
    assert producer.chain(tokens + [1] * 16, 16) == reference(tokens + [1] * 16)
    assert (producer.memos[16].looked_up, producer.memos[16].hashed) == (4, 5)


def test_block_sizes_are_remembered_apart() -> None:
    producer = BlocksProducer("blocks", BlocksParams())
    tokens = list(range(64))
    assert producer.chain(tokens, 16) == reference(tokens, 16)
    assert producer.chain(tokens, 32) == reference(tokens, 32)
    assert producer.chain(tokens, 16) == reference(tokens, 16)
    assert (producer.memos[16].looked_up, producer.memos[32].looked_up) == (4, 0)


def test_the_memo_is_bounded_and_chains_stay_exact() -> None:
    producer = BlocksProducer("blocks", BlocksParams(cache_max_blocks=4))
    prompts = [list(range(start, start + 16 * 3)) for start in range(0, 400, 50)]
    for tokens in prompts + prompts[::-1]:
        assert producer.chain(tokens, 16) == reference(tokens)
        assert len(producer.memos[16]) <= 4
    long = list(range(16 * 9))      # more blocks than the memo holds
    assert producer.chain(long, 16) == reference(long)
    assert producer.chain(long, 16) == reference(long) and len(producer.memos[16]) <= 4


def test_threads_hashing_overlapping_prompts_get_exact_chains() -> None:
    producer = BlocksProducer("blocks", BlocksParams(cache_max_blocks=64))
    shared = list(range(16 * 6))
    prompts = [shared[:16 * (1 + i % 6)] + [i] * 40 for i in range(60)]
    expected = [reference(tokens) for tokens in prompts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda tokens: producer.chain(tokens, 16), prompts))
    assert got == expected


def test_no_tokens_no_hashes_and_extra_sizes() -> None:
    producer = BlocksProducer("blocks", BlocksParams(extra_block_sizes=(32,)))
    request = request_with([])
    producer.produce(request, [make_view("a")])
    assert request.block_hashes == {}
    request = request_with(list(range(64)))
    producer.produce(request, [make_view("a")])
    assert sorted(request.block_hashes) == [16, 32] and len(request.block_hashes[32]) == 2


def test_long_prompts_ask_to_run_off_the_loop() -> None:
    producer = BlocksProducer("blocks", BlocksParams(offload_min_blocks=4))
    request = request_with(list(range(64)))
    assert producer.should_offload(request)
    assert not producer.should_offload(request_with(list(range(63))))
    assert not producer.should_offload(request_with([]))


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"algo": "md5"}, "algo"), ({"extra_block_sizes": (0,)}, "extra_block_sizes"),
    ({"cache_max_blocks": -1}, "cache_max_blocks")])
def test_bad_params_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ParamError) as info:
        BlocksParams(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
