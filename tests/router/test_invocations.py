"""SageMaker's ``POST /invocations`` through the router, over the example fleet of two
generative and two embedding workers (``embeddings_fleet``): each body goes to a worker of
its model's runner as the API it is, and comes back as that API's answer, counted under that
API; the worker is sent it on its own ``/invocations``; a body no API takes is vLLM's 400;
the path is guarded by the clients' keys as ``/v1`` is."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from tests.router.gateway_support import MODEL, RouterFactory, scripted_router
from workers.fleet import FleetConfig

pytestmark = pytest.mark.integration
EMBEDDER = "Qwen/Qwen3-Embedding-0.6B"
GENERATIVE = {"h100-0", "a100-0"}
POOLING = {"embed-h100", "embed-l40s"}
MESSAGES = [{"role": "user", "content": "Where is my parcel?"}]
# (body, the API path it is answered as, its ``api`` label, the workers that may serve it)
BODIES: list[tuple[dict[str, Any], str, str, set[str]]] = [
    ({"model": MODEL, "messages": MESSAGES, "max_tokens": 4}, "/v1/chat/completions", "chat",
     GENERATIVE),
    ({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 4}, "/v1/completions",
     "completions", GENERATIVE),
    ({"model": EMBEDDER, "input": ["where is my parcel", "hello"]}, "/v1/embeddings",
     "embeddings", POOLING),
    ({"model": EMBEDDER, "messages": MESSAGES}, "/v1/embeddings", "embeddings", POOLING),
    ({"model": EMBEDDER, "query": "parcel", "documents": ["my parcel is late", "hi"]},
     "/rerank", "rerank", POOLING),
    ({"model": EMBEDDER, "text_1": "parcel", "text_2": ["my parcel is late", "hi"]},
     "/score", "score", POOLING),
]


async def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None
               ) -> tuple[int, dict[str, str], Any]:
    async with aiohttp.ClientSession() as session, session.post(
            url, json=body, headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.json(content_type=None)


def without_ids(answer: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in answer.items() if key not in ("id", "created")}


@pytest.mark.parametrize(("body", "path", "api", "servers"), BODIES,
                         ids=[f"{api}-{sorted(body)[0]}" for body, _, api, _ in BODIES])
async def test_an_invocation_is_routed_and_answered_as_the_api_its_body_is(
        embeddings_fleet: FleetConfig, make_router: RouterFactory, body: dict[str, Any],
        path: str, api: str, servers: set[str]) -> None:
    router = await make_router(embeddings_fleet)
    status, headers, routed = await post(router.url + "/invocations", body)
    assert status == 200, routed
    worker = headers["x-kvroute-worker"]
    assert worker in servers and headers["x-kvroute-reason"]
    direct_status, _, direct = await post(embeddings_fleet.worker(worker).info.url + path, body)
    if servers is GENERATIVE:      # (its text is drawn anew each time)
        routed, direct = (
            {"object": answer["object"], "model": answer["model"], "usage": answer["usage"],
             "finish": [choice["finish_reason"] for choice in answer["choices"]]}
            for answer in (routed, direct))
    assert (status, without_ids(routed)) == (direct_status, without_ids(direct))
    assert router.metric("kvroute_requests_total", model=body["model"], worker=worker,
                         status="200", api=api) == 1
    assert router.metric("kvroute_requests_total", api="other") == 0
    assert router.metric("kvroute_prompt_tokens_total", worker=worker) == \
        routed["usage"]["prompt_tokens"] > 0


async def test_a_streamed_invocation_is_relayed_as_a_chat_stream(
        embeddings_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """The router asks the worker for the usage chunk (its own count) and takes it off
    again for a client that did not ask for it, as on ``/v1/chat/completions``."""
    router = await make_router(embeddings_fleet)
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 4, "stream": True}
    async with aiohttp.ClientSession() as session, session.post(
            router.url + "/invocations", json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        worker = resp.headers["x-kvroute-worker"]
        events = [line[len(b"data: "):].strip() for line in (await resp.read()).splitlines()
                  if line.startswith(b"data: ")]
    assert worker in GENERATIVE
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(event) for event in events[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert not any(chunk.get("usage") for chunk in chunks)       # not asked for
    assert router.metric("kvroute_completion_tokens_total", worker=worker) == 4
    assert router.metric("kvroute_requests_total", worker=worker, status="200",
                         api="chat") == 1


async def test_a_pooling_models_body_no_api_takes_is_vllms_400_and_sent_nowhere(
        embeddings_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(embeddings_fleet)
    body = {"model": EMBEDDER, "prompt": "hi"}       # a completion's prompt
    status, headers, answer = await post(router.url + "/invocations", body)
    expected = ["EmbeddingRequest", "RerankRequest", "ScoreRequest", "PoolingRequest"]
    assert (status, answer) == (400, {"error": {
        "message": f"Cannot find suitable handler for request. Expected one of: {expected}",
        "type": "BadRequestError", "param": None, "code": 400}})
    assert headers["x-kvroute-worker"] == "none"
    for worker in POOLING:                 # what the workers say, each its own
        direct_status, _, direct = await post(
            embeddings_fleet.worker(worker).info.url + "/invocations", body)
        assert (direct_status, direct) == (status, answer)
    # (no API took it: counted under none)
    assert router.metric("kvroute_requests_total", status="400", api="other") == 1
    assert router.metric("kvroute_requests_total", status="200") == 0


async def test_a_generative_models_body_of_no_other_api_is_a_completions_400(
        embeddings_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """vLLM's completion type leaves ``prompt`` optional: the body is a completion, refused
    for its missing prompt (by the router, as on ``/v1/completions``)."""
    router = await make_router(embeddings_fleet)
    body = {"model": MODEL, "input": "hi"}          # an embedding's input
    invoked = await post(router.url + "/invocations", body)
    completion = await post(router.url + "/v1/completions", body)
    assert (invoked[0], invoked[2]) == (completion[0], completion[2])
    assert invoked[0] == 400 and invoked[2]["error"]["param"] == "prompt"
    assert router.metric("kvroute_requests_total", status="400", api="completions") == 2


async def test_the_worker_is_sent_the_body_on_its_own_invocations(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """vLLM decides among its own types there (a classifier's input is a classification,
    which the router cannot tell from an embedding)."""
    seen: list[tuple[str, bytes]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append((request.path, await request.read()))
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})

    body = orjson.dumps({"model": MODEL, "messages": MESSAGES, "max_tokens": 2})
    async with scripted_router(emulated_fleet, make_router, answer) as router, \
            aiohttp.ClientSession() as session, session.post(
                router.url + "/invocations", data=body,
                headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 200
        assert (await resp.json())["choices"][0]["message"]["content"] == "hi"
    assert seen == [("/invocations", body)]          # the client's bytes, as on any path
    assert router.metric("kvroute_completion_tokens_total", worker="w") == 1


async def test_invocations_needs_a_clients_key_as_v1_does(
        embeddings_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """vLLM leaves ``/invocations`` to SageMaker's own authentication; through the router
    it generates as ``/v1`` does, so a tenant's key and budget apply to it."""
    router = await make_router(embeddings_fleet, api_keys=("sk-test",))
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 2}
    status, _, answer = await post(router.url + "/invocations", body)
    assert status == 401, answer
    status, _, answer = await post(router.url + "/invocations", body,
                                   {"Authorization": "Bearer sk-test"})
    assert status == 200, answer
