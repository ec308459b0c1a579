"""The engine's Request: output cut at max_model_len, lazily grown hash chains."""

from __future__ import annotations

import pytest

from workers.engine.api import EngineRequest
from workers.engine.block_hash import block_hash_chain, get_hash_function, none_hash
from workers.engine.request import BlockHasher, Request, RequestStatus


def test_output_beyond_max_model_len_is_cut_and_finishes_with_length() -> None:
    request = Request(EngineRequest("a", [1] * 10, [2] * 10, finish_reason="stop"), 15)
    assert request.max_output_tokens == 5 and request.finish_reason == "length"
    assert request.num_tokens == 10 and request.status == RequestStatus.WAITING
    assert not request.is_finished and not request.is_decoding


@pytest.mark.parametrize("algo", ["sha256", "builtin"])
def test_hash_chain_grows_lazily_and_matches_the_public_chain(algo: str) -> None:
    tokens = list(range(100))
    lora = (("lora", "adapter", "/adapters/adapter"),)      # vLLM's: name and path
    request = Request(EngineRequest("a", tokens[:60], tokens[60:], lora_name="adapter",
                                    lora_path="/adapters/adapter", cache_salt="s"), 4096)
    hasher = BlockHasher(get_hash_function(algo), none_hash(algo), 16,
                         int_chain=algo == "builtin")
    hasher.extend(request, 2)
    assert len(request.block_hashes) == 2
    hasher.extend(request, 6)                              # output tokens are hashed too
    expected = block_hash_chain(tokens, 16, algo=algo, extra_keys=lora, cache_salt="s")
    if algo == "builtin":
        assert request.block_hashes == [int.from_bytes(h, "big") for h in expected]
    else:
        assert request.block_hashes == expected
