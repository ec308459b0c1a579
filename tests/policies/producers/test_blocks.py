"""The blocks producer: vLLM's chained hashes at every worker block size, cached."""

from __future__ import annotations

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


def test_seed_and_algorithm_are_the_workers() -> None:
    producer = BlocksProducer("blocks", BlocksParams(algo="sha256_cbor", seed="0"))
    tokens = list(range(1, 33))
    request = request_with(tokens)
    producer.produce(request, [make_view("a")])
    assert list(request.block_hashes[16]) == [
        to_event_int(h) for h in block_hash_chain(tokens, 16, algo="sha256_cbor", seed="0")]


def test_chains_are_cached_and_bounded() -> None:
    producer = BlocksProducer("blocks", BlocksParams(cache_max_blocks=3))
    first = producer.chain(list(range(32)), 16)
    assert producer.chain(list(range(32)), 16) is first
    producer.chain(list(range(100, 148)), 16)           # 3 blocks: evicts the first chain
    assert producer.cache.blocks == 3 and len(producer.cache) == 1


def test_no_tokens_no_hashes_and_extra_sizes() -> None:
    producer = BlocksProducer("blocks", BlocksParams(extra_block_sizes=(32,)))
    request = request_with([])
    producer.produce(request, [make_view("a")])
    assert request.block_hashes == {}
    request = request_with(list(range(64)))
    producer.produce(request, [make_view("a")])
    assert sorted(request.block_hashes) == [16, 32] and len(request.block_hashes[32]) == 2


def test_long_uncached_prompts_ask_to_run_off_the_loop() -> None:
    producer = BlocksProducer("blocks", BlocksParams(offload_min_blocks=4))
    request = request_with(list(range(64)))
    assert producer.should_offload(request)
    producer.produce(request, [make_view("a")])
    assert not producer.should_offload(request)
    assert not producer.should_offload(request_with(list(range(32))))


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"algo": "md5"}, "algo"), ({"extra_block_sizes": (0,)}, "extra_block_sizes"),
    ({"cache_max_blocks": -1}, "cache_max_blocks")])
def test_bad_params_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ParamError) as info:
        BlocksParams(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
