"""``POST /v1/embeddings`` through the router: the example fleet of two generative and two
pooling (embedding) workers (``embeddings_fleet``: ``config/examples/embeddings-fleet.yaml``,
emulated in their own process), and the official ``openai`` client."""

from __future__ import annotations

import asyncio
import math

import aiohttp
import openai
import pytest

from tests.router.gateway_support import MODEL, RouterFactory
from workers.fleet import FleetConfig

pytestmark = pytest.mark.integration
EMBEDDER = "Qwen/Qwen3-Embedding-0.6B"
POOLING_WORKERS = {"embed-h100", "embed-l40s"}


async def test_the_openai_client_gets_embeddings_from_a_pooling_worker(
        embeddings_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(embeddings_fleet)
    client = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)
    raw = await client.embeddings.with_raw_response.create(   # the SDK asks for base64
        model=EMBEDDER, input=["where is my order", "reset my password"])
    answer = raw.parse()
    assert raw.headers["x-kvroute-worker"] in POOLING_WORKERS
    assert raw.headers["x-kvroute-reason"]
    assert [item.index for item in answer.data] == [0, 1]
    for item in answer.data:
        assert len(item.embedding) == 1024
        assert math.isclose(sum(x * x for x in item.embedding), 1.0, rel_tol=1e-3)
    assert answer.usage.prompt_tokens == answer.usage.total_tokens > 4
    floats = await client.embeddings.create(model=EMBEDDER, input="where is my order",
                                            encoding_format="float", dimensions=16)
    assert floats.data[0].embedding == pytest.approx(
        [x / math.sqrt(sum(y * y for y in answer.data[0].embedding[:16]))
         for x in answer.data[0].embedding[:16]], abs=1e-5)
    worker = raw.headers["x-kvroute-worker"]
    gpu = "H100-80GB" if worker == "embed-h100" else "L40S-48GB"
    assert router.metric("kvroute_requests_total", model=EMBEDDER, worker=worker, gpu=gpu,
                         profile="default", status="200") >= 1
    assert router.metric("kvroute_prompt_tokens_total", worker=worker, gpu=gpu) >= 5
    # named after the body's request_id, as vLLM names a pooling request without the header
    named = await client.embeddings.with_raw_response.create(
        model=EMBEDDER, input="where is my order", extra_body={"request_id": "emb-9"})
    assert named.headers["x-request-id"] == "emb-9"
    assert named.http_response.json()["id"] == "embd-emb-9"
    await client.close()


async def test_each_input_of_a_batch_must_fit_the_window_not_their_sum(
        embeddings_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A batch of inputs was refused when their tokens together passed one window (8,192
    here), though the worker embeds each on its own; an input filling the window was
    refused for want of room for an output token an embedding never makes."""
    router = await make_router(embeddings_fleet)
    client = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)
    batch = await client.embeddings.create(model=EMBEDDER, input=[[7] * 5_000, [8] * 5_000])
    assert [item.index for item in batch.data] == [0, 1]
    assert batch.usage.prompt_tokens == 10_000
    texts = await client.embeddings.create(
        model=EMBEDDER, input=[f"document {i}: " + "the quick brown fox. " * 300
                               for i in range(12)])
    assert len(texts.data) == 12 and texts.usage.prompt_tokens > 8192
    whole = await client.embeddings.create(model=EMBEDDER, input=[[7] * 8192])
    assert whole.usage.prompt_tokens == 8192
    with pytest.raises(openai.BadRequestError) as info:       # one input too long: refused
        await client.embeddings.create(model=EMBEDDER, input=[[7] * 10, [7] * 8300])
    assert isinstance(info.value.body, dict)
    assert "your prompt contains 8300 input tokens" in info.value.body["message"]
    await client.close()


async def test_concurrent_embeddings_spread_over_the_pooling_workers_only(
        embeddings_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(embeddings_fleet)
    text = "a longer passage to embed, " * 30

    async def one(session: aiohttp.ClientSession, i: int) -> tuple[int, str]:
        async with session.post(f"{router.url}/v1/embeddings",
                                json={"model": EMBEDDER, "input": f"{i} {text}"}) as resp:
            await resp.read()
            return resp.status, resp.headers["x-kvroute-worker"]

    async with aiohttp.ClientSession() as session:
        answers = await asyncio.gather(*(one(session, i) for i in range(24)))
    assert {status for status, _ in answers} == {200}
    assert {worker for _, worker in answers} <= POOLING_WORKERS


@pytest.mark.parametrize(("path", "body", "message"), [
    ("/v1/embeddings", {"model": MODEL, "input": "x"}, "does not serve embeddings"),
    ("/v1/chat/completions", {"model": EMBEDDER, "messages": [{"role": "user", "content": "x"}]},
     "serves pooling only"),
    ("/v1/completions", {"model": EMBEDDER, "prompt": "x"}, "serves pooling only"),
    ("/v1/embeddings", {"model": EMBEDDER}, "Missing required parameter: 'input'"),
    ("/v1/embeddings", {"model": EMBEDDER, "input": {"text": "x"}}, "input: must be"),
    ("/v1/embeddings", {"model": EMBEDDER, "input": "word " * 9000},
     "maximum context length is 8192"),
])
async def test_requests_for_what_a_model_does_not_serve_get_a_clear_400(
        embeddings_fleet: FleetConfig, make_router: RouterFactory, path: str,
        body: dict[str, object], message: str) -> None:
    router = await make_router(embeddings_fleet)
    async with aiohttp.ClientSession() as session, session.post(router.url + path,
                                                                json=body) as resp:
        answer = await resp.json()
    assert resp.status == 400, answer
    assert message in answer["error"]["message"]
    # counted as every refusal of a body is (a model of the wrong runner was not)
    assert "maximum context length" in message or router.metric(
        "kvroute_requests_total", model=body["model"], worker="", gpu="", profile="none",
        status="400") + router.metric("kvroute_requests_total", model="(unknown)", worker="",
                                      gpu="", profile="none", status="400") == 1
    async with aiohttp.ClientSession() as session, session.post(
            f"{router.url}/v1/embeddings", json={"model": EMBEDDER, "input": "still fine"}) as resp:
        assert resp.status == 200          # the router keeps serving


async def test_a_rule_rewriting_embeddings_to_a_generative_model_is_a_500_naming_it(
        embeddings_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A routing file's mistake (an unscoped model rewrite, as `kvroute validate --fleet`
    warns): the generative worker would answer a bare 404; the router says which rule."""
    routing = ("profiles: {default: {filters: [model, healthy]}}\n"
               f"rules: [{{name: all-to-llama, then: {{model: {MODEL}}}}}]\n")
    router = await make_router(embeddings_fleet, routing)
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{router.url}/v1/embeddings",
                                json={"model": EMBEDDER, "input": "hello"}) as resp:
            answer = await resp.json()
        assert resp.status == 500, answer
        assert answer["error"]["code"] == "routing_misconfigured"
        assert "`all-to-llama`" in answer["error"]["message"]
        assert resp.headers["x-kvroute-worker"] != "none"     # decided, then refused
        async with session.post(f"{router.url}/v1/chat/completions", json={
                "model": MODEL, "max_tokens": 2,
                "messages": [{"role": "user", "content": "hi"}]}) as resp:
            assert resp.status == 200          # the rule is right for chat: served
    assert router.metric("kvroute_requests_total", model=MODEL, worker="", gpu="",
                         profile="default", status="500") == 1
