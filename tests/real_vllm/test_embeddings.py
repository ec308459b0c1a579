"""Embeddings on a real vLLM (CPU) pooling engine, through kvroute, and the emulator against it.

A third engine, for this module only (``embedding_fleet``: all-MiniLM-L6-v2 with its real
weights, ``conftest.py``).
"""

from __future__ import annotations

import math

import openai
import pytest

from tests.real_vllm.conftest import EMBEDDER
from tests.real_vllm.event_streams import post
from tests.real_vllm.test_emulator_fidelity import paths
from workers.emulator.process import EmulatorProcess
from workers.fleet import FleetConfig

TEXTS = ["where is my parcel", "the integral of x squared", "hello"]


async def test_embeddings_through_kvroute_are_the_engines_own(
        embedding_fleet: FleetConfig, router_url: str) -> None:
    engine = embedding_fleet.workers[0].info.url
    status, direct = await post(f"{engine}/v1/embeddings", {"model": EMBEDDER, "input": TEXTS})
    assert status == 200, direct
    client = openai.AsyncOpenAI(base_url=f"{router_url}/v1", api_key="unused", max_retries=0)
    raw = await client.embeddings.with_raw_response.create(model=EMBEDDER, input=TEXTS)
    routed = raw.parse()       # asked for as base64 by the SDK, decoded by it
    await client.close()
    assert raw.headers["x-kvroute-worker"] == "cpu-embed"
    assert len(routed.data) == len(TEXTS)
    for mine, theirs in zip(routed.data, direct["data"], strict=True):
        assert len(mine.embedding) == 384
        assert mine.embedding == pytest.approx(theirs["embedding"], abs=1e-5)
        assert math.isclose(sum(x * x for x in mine.embedding), 1.0, rel_tol=1e-3)
    assert routed.usage.prompt_tokens == direct["usage"]["prompt_tokens"]


async def test_what_the_model_does_not_serve_and_the_tokenizer_through_kvroute(
        embedding_fleet: FleetConfig, router_url: str) -> None:
    engine = embedding_fleet.workers[0].info.url
    # the engine has no completion route for a pooling model: a bare 404
    assert await post(f"{engine}/v1/completions", {"model": EMBEDDER, "prompt": "x"}) == (
        404, {"detail": "Not Found"})
    status, body = await post(f"{router_url}/v1/completions", {"model": EMBEDDER, "prompt": "x"})
    assert status == 400 and "serves pooling only" in body["error"]["message"], body
    request = {"model": EMBEDDER, "prompt": "where is my parcel"}
    assert await post(f"{router_url}/tokenize", request) == await post(f"{engine}/tokenize",
                                                                      request)


async def test_the_emulator_answers_embeddings_as_vllm_does(
        embedding_fleet: FleetConfig) -> None:
    engine = embedding_fleet.workers[0].info.url
    too_long = {"model": EMBEDDER, "input": "word " * 300}
    with EmulatorProcess(gpu="l40s", model="all-minilm-l6-v2", served_model_names=[EMBEDDER],
                         time_scale=0.01) as emulator:
        for body in ({"model": EMBEDDER, "input": TEXTS},
                     {"model": EMBEDDER, "input": "hello", "encoding_format": "base64"}):
            real_status, real = await post(f"{engine}/v1/embeddings", body)
            emulated_status, emulated = await post(f"{emulator.url}/v1/embeddings", body)
            assert (emulated_status, paths(emulated)) == (real_status, paths(real))
            assert list(emulated["usage"]) == list(real["usage"])
            assert type(emulated["data"][0]["embedding"]) is type(real["data"][0]["embedding"])
            assert len(emulated["data"]) == len(real["data"])
        for refused in (too_long, {"model": EMBEDDER, "input": "x", "dimensions": 8}):
            assert (await post(f"{emulator.url}/v1/embeddings", refused)
                    == await post(f"{engine}/v1/embeddings", refused))
        wrong_route = {"model": EMBEDDER, "prompt": "x"}
        assert (await post(f"{emulator.url}/v1/completions", wrong_route)
                == await post(f"{engine}/v1/completions", wrong_route))
