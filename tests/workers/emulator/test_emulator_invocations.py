"""``POST /invocations`` (SageMaker's, as vLLM serves it) of an emulated generative and an
emulated embedding model, each in its own process: a body is answered by the API its shape
names, among those of the model's runner, else vLLM's 400; a body that is not JSON is
refused as on every other path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.workers.emulator.emulator_fixtures import MODEL, emulator
from workers.emulator.process import EmulatorProcess

pytestmark = pytest.mark.integration
EMBEDDER = "Qwen/Qwen3-Embedding-0.6B"
MESSAGES = [{"role": "user", "content": "Where is my parcel?"}]


@pytest.fixture(scope="module")
def generator() -> Iterator[EmulatorProcess]:
    with emulator(output_len={"dist": "fixed", "value": 3}) as proc:
        yield proc


@pytest.fixture(scope="module")
def embedder() -> Iterator[EmulatorProcess]:
    with EmulatorProcess(gpu="l40s", model="qwen3-embedding-0.6b",
                         served_model_names=[EMBEDDER], time_scale=0.01) as proc:
        yield proc


async def post(url: str, body: Any, content_type: str = "application/json"
               ) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    async with aiohttp.ClientSession() as session, session.post(
            url, data=data, headers={"Content-Type": content_type}) as resp:
        return resp.status, await resp.json(content_type=None)


def shape(answer: dict[str, Any]) -> dict[str, Any]:
    """What two answers to one body share (a generated text is drawn anew each time)."""
    return {"object": answer["object"], "model": answer["model"], "usage": answer["usage"]}


@pytest.mark.parametrize(("body", "path", "kind"), [
    ({"model": MODEL, "messages": MESSAGES}, "/v1/chat/completions", "chat.completion"),
    ({"model": MODEL, "prompt": "Once upon a time"}, "/v1/completions", "text_completion"),
    ({"messages": MESSAGES}, "/v1/chat/completions", "chat.completion"),   # its own model
])
async def test_a_generative_models_invocation_is_a_chat_or_a_completion(
        generator: EmulatorProcess, body: dict[str, Any], path: str, kind: str) -> None:
    status, invoked = await post(generator.url + "/invocations", body)
    assert status == 200, invoked
    assert invoked["object"] == kind
    direct_status, direct = await post(generator.url + path, body)
    assert (status, shape(invoked)) == (direct_status, shape(direct))


@pytest.mark.parametrize(("body", "path"), [
    ({"model": EMBEDDER, "input": ["where is my parcel", "hi"]}, "/v1/embeddings"),
    ({"model": EMBEDDER, "messages": MESSAGES}, "/v1/embeddings"),
    ({"model": EMBEDDER, "query": "parcel", "documents": ["late parcel", "hi"]}, "/rerank"),
    ({"model": EMBEDDER, "queries": "parcel", "documents": ["late parcel", "hi"]}, "/score"),
    ({"model": EMBEDDER, "text_1": "parcel", "text_2": "late parcel"}, "/score"),
])
async def test_an_embedding_models_invocation_is_its_pooling_api(
        embedder: EmulatorProcess, body: dict[str, Any], path: str) -> None:
    status, invoked = await post(embedder.url + "/invocations", body)
    assert status == 200, invoked
    direct_status, direct = await post(embedder.url + path, body)
    without_ids = [{k: v for k, v in answer.items() if k not in ("id", "created")}
                   for answer in (invoked, direct)]
    assert (status, without_ids[0]) == (direct_status, without_ids[1])


@pytest.mark.parametrize("body", [{"model": MODEL, "input": "hi"},
                                  {"model": MODEL, "messages": None, "prompt": None}])
async def test_a_generative_models_body_of_no_other_api_is_the_completions_400(
        generator: EmulatorProcess, body: dict[str, Any]) -> None:
    """As vLLM's: its completion type leaves ``prompt`` optional, so the completion's handler
    refuses the body ("Either prompt or prompt_embeds must be provided")."""
    invoked = await post(generator.url + "/invocations", body)
    direct = await post(generator.url + "/v1/completions", body)
    assert invoked == direct and invoked[0] == 400, invoked
    assert "prompt" in invoked[1]["error"]["message"]


async def test_a_pooling_models_body_no_api_takes_is_vllms_400(
        embedder: EmulatorProcess) -> None:
    status, answer = await post(embedder.url + "/invocations",
                                {"model": EMBEDDER, "prompt": "hi"})
    expected = ["EmbeddingRequest", "RerankRequest", "ScoreRequest", "PoolingRequest"]
    assert (status, answer) == (400, {"error": {
        "message": f"Cannot find suitable handler for request. Expected one of: {expected}",
        "type": "BadRequestError", "param": None, "code": 400}})


async def test_a_body_that_is_not_json_is_refused_as_on_any_path(
        generator: EmulatorProcess) -> None:
    for body, content_type in ((b"{not json", "application/json"),
                               (b'{"prompt": "hi"}', "text/plain")):
        invoked = await post(generator.url + "/invocations", body, content_type)
        direct = await post(generator.url + "/v1/completions", body, content_type)
        assert invoked == direct and invoked[0] == 400, invoked
