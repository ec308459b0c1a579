"""``POST /v1/embeddings`` of an emulated pooling model, in its own process, as vLLM answers."""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.workers.emulator.emulator_fixtures import MODEL, emulator
from workers.emulator.embeddings import embedding_of
from workers.emulator.process import EmulatorProcess

pytestmark = pytest.mark.integration
EMBEDDER = "Qwen/Qwen3-Embedding-0.6B"
HIDDEN = 1024


@pytest.fixture(scope="module")
def embedder() -> Iterator[EmulatorProcess]:
    with EmulatorProcess(gpu="l40s", model="qwen3-embedding-0.6b",
                         served_model_names=[EMBEDDER], time_scale=0.01,
                         emulate={"max_model_len": 64}) as proc:
        yield proc


async def post(url: str, json: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(url, json=json) as resp:
        if resp.content_type == "application/json":
            return resp.status, await resp.json()
        return resp.status, await resp.text()


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b))


async def test_each_input_gets_a_unit_vector_and_the_usage_counts_its_tokens(
        embedder: EmulatorProcess) -> None:
    status, body = await post(f"{embedder.url}/v1/embeddings", {
        "model": EMBEDDER, "input": ["where is my parcel", "where is my parcel", "integrals"]})
    assert status == 200, body
    assert body["object"] == "list" and body["model"] == EMBEDDER
    assert body["id"].startswith("embd-")
    vectors = [item["embedding"] for item in body["data"]]
    assert [item["index"] for item in body["data"]] == [0, 1, 2]
    assert all(item["object"] == "embedding" for item in body["data"])
    assert all(len(v) == HIDDEN and math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4)
               for v in vectors)
    assert vectors[0] == vectors[1]                      # the same text, the same vector
    assert cosine(vectors[0], vectors[2]) < 0.9
    usage = body["usage"]
    assert usage["completion_tokens"] == 0
    assert usage["prompt_tokens"] == usage["total_tokens"] > 3


async def test_base64_dimensions_token_ids_and_chat_input(embedder: EmulatorProcess) -> None:
    url = f"{embedder.url}/v1/embeddings"
    status, floats = await post(url, {"model": EMBEDDER, "input": [[5, 6, 7]], "dimensions": 8})
    assert status == 200, floats
    vector = floats["data"][0]["embedding"]
    assert vector == pytest.approx(embedding_of([5, 6, 7], 8, HIDDEN), abs=1e-6)
    status, packed = await post(url, {"model": EMBEDDER, "input": [5, 6, 7], "dimensions": 8,
                                      "encoding_format": "base64"})
    assert status == 200, packed
    raw = base64.b64decode(packed["data"][0]["embedding"])
    assert list(struct.unpack("<8f", raw)) == pytest.approx(vector, abs=1e-6)
    status, chat = await post(url, {"model": EMBEDDER,
                                    "messages": [{"role": "user", "content": "hello"}]})
    assert status == 200 and len(chat["data"]) == 1, chat


async def test_an_input_filling_the_window_is_embedded_as_vllm_does(
        embedder: EmulatorProcess) -> None:
    """An embedding generates nothing, so vLLM takes an input of the whole window; the
    emulator answered 500 (its engine kept room for an output token)."""
    status, body = await post(f"{embedder.url}/v1/embeddings",
                              {"model": EMBEDDER, "input": [[5] * 64, [6] * 10]})
    assert status == 200, body
    assert body["usage"]["prompt_tokens"] == 74
    assert body["data"][0]["embedding"] == pytest.approx(embedding_of([5] * 64, HIDDEN, HIDDEN),
                                                         abs=1e-6)
    status, body = await post(f"{embedder.url}/v1/embeddings",
                              {"model": EMBEDDER, "input": [[5] * 65]})
    assert status == 400, body


@pytest.mark.parametrize(("body", "needle"), [
    ({"model": EMBEDDER}, "input"),
    ({"model": EMBEDDER, "input": {"text": "x"}}, "input"),
    ({"model": EMBEDDER, "input": "x", "dimensions": 4096}, "dimensions"),
    ({"model": EMBEDDER, "input": "x", "encoding_format": "bits"}, "encoding_format"),
    ({"model": EMBEDDER, "input": "x", "encoding_format": "bytes", "embed_dtype": "float16"},
     "embed_dtype"),
    ({"model": EMBEDDER, "input": "word " * 100},
     "maximum context length is 64 tokens. However, your prompt contains at least 65"),
    ({"model": EMBEDDER, "input": [[10 ** 9]]}, "out of vocabulary"),
])
async def test_bad_input_is_a_400_naming_what_is_wrong(embedder: EmulatorProcess,
                                                       body: dict[str, Any], needle: str) -> None:
    status, answer = await post(f"{embedder.url}/v1/embeddings", body)
    assert status == 400, answer
    assert needle in str(answer["error"]["message"]) + str(answer["error"].get("param"))


async def test_a_pooling_model_serves_no_generation_and_a_generative_one_no_embeddings(
        embedder: EmulatorProcess) -> None:
    status, body = await post(f"{embedder.url}/v1/completions",
                              {"model": EMBEDDER, "prompt": "x"})
    assert (status, body) == (404, {"detail": "Not Found"})       # FastAPI's: no such route
    status, body = await post(f"{embedder.url}/v1/embeddings", {"model": "other", "input": "x"})
    assert status == 404 and "The model `other` does not exist" in body["error"]["message"]
    with emulator(time_scale=0.01) as generative:
        status, body = await post(f"{generative.url}/v1/embeddings",
                                  {"model": MODEL, "input": "x"})
        assert (status, body) == (404, {"detail": "Not Found"})


async def test_dimensions_only_for_a_matryoshka_model() -> None:
    with EmulatorProcess(gpu="l40s", model="all-minilm-l6-v2", served_model_names=["minilm"],
                         time_scale=0.01) as minilm:
        status, body = await post(f"{minilm.url}/v1/embeddings",
                                  {"model": "minilm", "input": "x", "dimensions": 8})
        assert (status, body["error"]["message"]) == (
            400, "Model 'minilm' does not support Matryoshka embeddings; dimensions must be "
                 "unset (received dimensions=8).")
        status, body = await post(f"{minilm.url}/v1/embeddings", {"model": "minilm",
                                                                  "input": "x"})
        assert status == 200 and len(body["data"][0]["embedding"]) == 384


async def test_a_large_batch_is_tokenized_off_the_loop_with_the_same_vectors(
        embedder: EmulatorProcess) -> None:
    texts = [f"passage {i}: " + "where is my parcel " * 3 for i in range(600)]   # > 20,000 chars
    assert sum(map(len, texts)) > 20_000
    status, batch = await post(f"{embedder.url}/v1/embeddings",
                               {"model": EMBEDDER, "input": texts})
    assert status == 200 and len(batch["data"]) == 600, batch
    status, alone = await post(f"{embedder.url}/v1/embeddings",
                               {"model": EMBEDDER, "input": texts[123]})
    assert status == 200
    assert batch["data"][123]["embedding"] == alone["data"][0]["embedding"]
