"""``POST /pooling`` of an emulated embedding model, in its own process, as vLLM answers it;
``/classify`` of a model that is no classifier: no such route."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.workers.emulator.emulator_fixtures import MODEL, emulator
from workers.emulator.pooling_api import NO_PLUGIN
from workers.emulator.process import EmulatorProcess

pytestmark = pytest.mark.integration
EMBEDDER = "Qwen/Qwen3-Embedding-0.6B"


@pytest.fixture(scope="module")
def embedder() -> Iterator[EmulatorProcess]:
    with EmulatorProcess(gpu="l40s", model="qwen3-embedding-0.6b",
                         served_model_names=[EMBEDDER], time_scale=0.01) as proc:
        yield proc


async def post(url: str, json: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(url, json=json) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_each_inputs_pooled_output_is_its_embedding(embedder: EmulatorProcess) -> None:
    texts = ["where is my parcel", "integrals"]
    status, embedded = await post(f"{embedder.url}/v1/embeddings",
                                  {"model": EMBEDDER, "input": texts})
    assert status == 200, embedded
    status, body = await post(f"{embedder.url}/pooling", {"model": EMBEDDER, "input": texts})
    assert status == 200, body
    assert list(body) == ["id", "object", "created", "model", "data", "usage"]
    assert body["id"].startswith("pooling-") and body["model"] == EMBEDDER
    assert [list(item) for item in body["data"]] == [["index", "object", "data"]] * 2
    assert [item["object"] for item in body["data"]] == ["pooling", "pooling"]
    assert [item["data"] for item in body["data"]] == [
        item["embedding"] for item in embedded["data"]]
    assert body["usage"] == embedded["usage"]
    status, packed = await post(f"{embedder.url}/pooling", {
        "model": EMBEDDER, "input": [5, 6, 7], "encoding_format": "base64"})
    assert status == 200, packed
    raw = base64.b64decode(packed["data"][0]["data"])
    assert len(struct.unpack(f"<{len(raw) // 4}f", raw)) == 1024
    status, chat = await post(f"{embedder.url}/pooling", {
        "model": EMBEDDER, "messages": [{"role": "user", "content": "hello"}]})
    assert status == 200 and len(chat["data"]) == 1, chat


async def test_a_binary_answer_is_the_vectors_bytes_described_by_its_metadata(
        embedder: EmulatorProcess) -> None:
    texts = ["where is my parcel", "integrals"]
    _, floats = await post(f"{embedder.url}/pooling", {"model": EMBEDDER, "input": texts})
    vectors = [item["data"] for item in floats["data"]]
    for path in ("/pooling", "/v1/embeddings"):
        async with aiohttp.ClientSession() as session, session.post(
                embedder.url + path, json={"model": EMBEDDER, "input": texts,
                                           "encoding_format": "bytes"}) as resp:
            assert (resp.status, resp.content_type) == (200, "application/octet-stream")
            raw, metadata = await resp.read(), json.loads(resp.headers["metadata"])
        assert list(metadata) == ["id", "created", "model", "data", "usage"]
        assert metadata["id"].startswith("pooling-" if path == "/pooling" else "embd-")
        assert metadata["data"] == [
            {"index": i, "embed_dtype": "float32", "endianness": "native", "start": 4096 * i,
             "end": 4096 * (i + 1), "shape": [1024]} for i in range(2)]
        assert metadata["usage"] == {"prompt_tokens": floats["usage"]["prompt_tokens"],
                                     "total_tokens": floats["usage"]["total_tokens"]}
        assert [list(struct.unpack("=1024f", raw[i * 4096:(i + 1) * 4096]))
                for i in range(2)] == [pytest.approx(v, abs=1e-6) for v in vectors]
    async with aiohttp.ClientSession() as session, session.post(
            f"{embedder.url}/pooling", json={"model": EMBEDDER, "input": texts[0],
                                             "encoding_format": "bytes_only",
                                             "endianness": "big"}) as resp:
        assert resp.status == 200 and "metadata" not in resp.headers
        assert list(struct.unpack(">1024f", await resp.read())) == pytest.approx(
            vectors[0], abs=1e-6)


@pytest.mark.parametrize(("body", "param", "message"), [
    ({"input": "a", "dimensions": 8}, "dimensions",
     "dimensions is currently not supported (parameter=dimensions)"),
    ({"data": {"x": 1}}, "task", NO_PLUGIN),
    ({"input": "a", "task": "classify"}, "task",
     "Unsupported task: 'classify' Supported tasks: ['embed', 'token_embed'] (parameter=task)"),
    ({"input": "a", "task": "token_embed"}, "task",
     "Try switching the model's pooling_task via --pooler-config.task token_embed. "
     "(parameter=task)"),
])
async def test_what_vllm_refuses_of_an_embedding_model_in_its_words(
        embedder: EmulatorProcess, body: dict[str, Any], param: str, message: str) -> None:
    assert await post(f"{embedder.url}/pooling", {"model": EMBEDDER, **body}) == (400, {
        "error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}})


async def test_a_body_of_no_shape_is_every_shapes_validation_errors(
        embedder: EmulatorProcess) -> None:
    status, body = await post(f"{embedder.url}/pooling", {"model": EMBEDDER})
    assert (status, body["error"]["param"], body["error"]["type"]) == (
        400, "body.input", "Bad Request")
    assert body["error"]["message"] == "3 validation errors:\n" + "\n".join(
        f"  {{'type': 'missing', 'loc': 'body.{name}', 'msg': 'Field required', "
        "'input': '<dict of 1 items>'}" for name in ("input", "messages", "data"))
    status, body = await post(f"{embedder.url}/pooling", {"model": EMBEDDER, "input": 5})
    assert (status, body["error"]["param"]) == (400, "body.input")
    assert body["error"]["message"].startswith(
        "6 validation errors:\n  {'type': 'list_type', 'loc': 'body.input', 'msg': 'Input "
        "should be a valid list', 'input': '5'}")


async def test_no_classify_route_for_an_embedding_model_nor_pooling_for_a_generative_one(
        embedder: EmulatorProcess) -> None:
    assert await post(f"{embedder.url}/classify", {"model": EMBEDDER, "input": "hi"}) == (
        404, {"detail": "Not Found"})
    with emulator(time_scale=0.01) as generative:
        for path in ("/pooling", "/classify"):
            assert await post(generative.url + path, {"model": MODEL, "input": "hi"}) == (
                404, {"detail": "Not Found"})


@pytest.mark.parametrize("path", ["/v1/embeddings", "/pooling"])
async def test_an_endianness_that_is_not_a_name_is_a_400(embedder: EmulatorProcess,
                                                          path: str) -> None:
    """A list or an object there was a 500 (unhashable in the check)."""
    for endianness in ([], {"x": 1}):
        status, body = await post(f"{embedder.url}{path}", {
            "model": EMBEDDER, "input": "hi", "encoding_format": "bytes",
            "endianness": endianness})
        assert status == 400, body


async def test_texts_past_the_window_are_cut_when_the_request_asks(
        embedder: EmulatorProcess) -> None:
    """As vLLM: ``truncate_prompt_tokens`` (-1: the window) on embeddings and pooling, and
    ``max_tokens_per_doc`` on a rerank; without them such a text is a 400."""
    long = "word " * 60_000
    for path, body in [("/v1/embeddings", {"input": long}), ("/pooling", {"input": long}),
                       ("/rerank", {"query": "q", "documents": [long, "short"]})]:
        status, _ = await post(f"{embedder.url}{path}", {"model": EMBEDDER, **body})
        assert status == 400, path
        cut = {"max_tokens_per_doc": 100} if path == "/rerank" else {
            "truncate_prompt_tokens": -1}
        status, answer = await post(f"{embedder.url}{path}", {"model": EMBEDDER, **body, **cut})
        assert status == 200, (path, answer)
    status, answer = await post(f"{embedder.url}/v1/embeddings", {
        "model": EMBEDDER, "input": long, "truncate_prompt_tokens": 7})
    assert status == 200 and answer["usage"]["prompt_tokens"] == 7
