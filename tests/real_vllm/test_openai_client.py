"""The official ``openai`` client through kvroute to real vLLM: chat, streaming, completions
and errors look as the engine itself answers (same fields, chunk shapes, statuses)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openai
import pytest
import yaml
from openai.types.chat import ChatCompletionMessageParam

from tests.real_vllm.conftest import (
    MODEL,
    REPO_ROOT,
    RealFleet,
    RouterFactory,
    RouterHandle,
    prefix_routing,
)

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "system", "content": "You answer briefly."},
            {"role": "user", "content": "Name three colours."}]

# the model and health filters only: errors are the engine's to give
PASS_THROUGH_ROUTING = yaml.safe_dump({
    "profiles": {"default": {"filters": [{"type": "model"}, {"type": "healthy"}],
                             "scorers": [{"type": "inflight", "weight": 1.0}],
                             "picker": {"type": "max-score"}}},
    "default_profile": "default"})


# the same, taking the workers in turn: n requests in a row reach each of n workers once
ROUND_ROBIN_ROUTING = yaml.safe_dump({
    "profiles": {"default": {"filters": [{"type": "model"}, {"type": "healthy"}],
                             "scorers": [], "picker": {"type": "round-robin"}}},
    "default_profile": "default"})


@pytest.fixture
async def router(make_router: RouterFactory) -> RouterHandle:
    return await make_router(PASS_THROUGH_ROUTING)


def client_for(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


async def post_json(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        return resp.status, await resp.json(content_type=None)


async def stream_events(url: str, body: dict[str, Any]) -> list[Any]:
    """Decoded ``data:`` events of an SSE response ("[DONE]" kept as a string)."""
    events: list[Any] = []
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        assert resp.status == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        async for raw in resp.content:
            line = raw.decode().strip()
            if line.startswith("data: "):
                payload = line.removeprefix("data: ")
                events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def same_shapes(through: list[Any], direct: list[Any]) -> None:
    """Same kinds of events in the same places (the engine may merge tokens into fewer
    chunks when busy, so the number of content chunks can differ)."""
    assert shape(through[0]) == shape(direct[0])
    assert [shape(e) for e in through[-3:]] == [shape(e) for e in direct[-3:]]
    assert {shape(e) for e in through} == {shape(e) for e in direct}


def shape(event: Any) -> Any:
    """Keys of an event and of its choices and deltas (values ignored)."""
    if not isinstance(event, dict):
        return event
    choices = event.get("choices") or []
    return (tuple(sorted(event)),
            tuple((tuple(sorted(c)), tuple(sorted(c.get("delta") or {}))) for c in choices))


async def test_chat_completion(real_fleet: RealFleet, router: RouterHandle) -> None:
    client = client_for(router.url)
    raw = await client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0)
    assert raw.headers["x-kvroute-worker"] in {w.info.id for w in real_fleet.fleet.workers}
    reply = raw.parse()
    assert reply.object == "chat.completion" and reply.model == MODEL
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].finish_reason in ("length", "stop")
    assert reply.usage is not None and reply.usage.completion_tokens <= 8
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 8, "temperature": 0}
    _, direct = await post_json(real_fleet.urls[0] + "/v1/chat/completions", body)
    assert reply.usage.prompt_tokens == direct["usage"]["prompt_tokens"]
    assert set(reply.model_dump()) >= set(direct)            # every field vLLM sends


async def test_chat_streaming_keeps_vllm_chunk_shapes(real_fleet: RealFleet,
                                                      router: RouterHandle) -> None:
    client = client_for(router.url)
    stream = await client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=6, temperature=0,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-2].choices[0].finish_reason in ("length", "stop")
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens == 6
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 6, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    through = await stream_events(router.url + "/v1/chat/completions", body)
    direct = await stream_events(real_fleet.urls[0] + "/v1/chat/completions", body)
    assert through[-1] == direct[-1] == "[DONE]"
    same_shapes(through, direct)
    assert isinstance(text, str)


async def test_completions_and_streamed_completions(real_fleet: RealFleet,
                                                    router: RouterHandle) -> None:
    client = client_for(router.url)
    reply = await client.completions.create(model=MODEL, prompt="hello world", max_tokens=5,
                                            temperature=0)
    assert reply.object == "text_completion"
    assert reply.usage is not None and reply.usage.prompt_tokens == 4   # [CLS] hello world [SEP]
    body = {"model": MODEL, "prompt": "hello world", "max_tokens": 5, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    through = await stream_events(router.url + "/v1/completions", body)
    direct = await stream_events(real_fleet.urls[0] + "/v1/completions", body)
    same_shapes(through, direct)


async def test_an_echoed_completion_of_no_tokens_is_served_as_by_the_engine(
        real_fleet: RealFleet, router: RouterHandle) -> None:
    """``echo`` with ``max_tokens: 0`` (a prompt's logprobs alone) is vLLM's 200; the router
    refused it with a 400."""
    body = {"model": MODEL, "prompt": "hello world", "max_tokens": 0, "echo": True,
            "logprobs": 1, "temperature": 0}
    status, direct = await post_json(real_fleet.urls[0] + "/v1/completions", body)
    assert status == 200
    status, through = await post_json(router.url + "/v1/completions", body)
    assert status == 200
    assert through["choices"][0]["text"] == direct["choices"][0]["text"]
    assert through["choices"][0]["logprobs"]["tokens"] == direct["choices"][0]["logprobs"]["tokens"]
    assert through["usage"] == direct["usage"]


@pytest.mark.parametrize(("body", "kind"), [
    ({"model": MODEL, "messages": MESSAGES, "max_tokens": 4, "temperature": 0},
     "chat.completion"),
    ({"model": MODEL, "prompt": "hello world", "max_tokens": 4, "temperature": 0},
     "text_completion"),
], ids=["chat", "completion"])
async def test_sagemakers_invocations_are_answered_as_by_the_engine(
        real_fleet: RealFleet, router: RouterHandle, body: dict[str, Any], kind: str) -> None:
    """``POST /invocations`` (SageMaker's hosting contract, which vLLM serves beside
    ``/ping``) was a 404 at the router: now routed as the API its body is, and answered by
    the worker's own ``/invocations``."""
    status, direct = await post_json(real_fleet.urls[0] + "/invocations", body)
    assert status == 200 and direct["object"] == kind, direct
    status, through = await post_json(router.url + "/invocations", body)
    assert status == 200, through
    assert through["object"] == kind and through["usage"] == direct["usage"]
    assert through["choices"][0]["finish_reason"] == direct["choices"][0]["finish_reason"]


async def test_a_generative_models_invocation_of_no_other_api_is_a_completions_400(
        real_fleet: RealFleet, router: RouterHandle) -> None:
    """vLLM's completion type leaves ``prompt`` optional: a body that is no chat is a
    completion, refused for its missing prompt (the router's words for that 400 are its own,
    as on ``/v1/completions``)."""
    body = {"model": MODEL, "input": "hello"}       # an embedding's, to a generative model
    status, direct = await post_json(real_fleet.urls[0] + "/invocations", body)
    assert (status, direct["error"]["param"]) == (400, "prompt"), direct
    assert "Either prompt or prompt_embeds must be provided" in direct["error"]["message"]
    status, through = await post_json(router.url + "/invocations", body)
    assert (status, through["error"]["param"]) == (400, "prompt"), through
    assert through == (await post_json(router.url + "/v1/completions", body))[1]


def without_values(event: Any) -> str:
    """The event as JSON with its per-request values (id, created, generated text) blanked:
    keys, their order and every other value stay."""
    if not isinstance(event, dict):
        return str(event)
    blanked = {**event, "id": "", "created": 0}
    blanked["choices"] = [{**c, **({"text": ""} if "text" in c else {}),
                           **({"delta": {**c["delta"], "content": ""}}
                              if "content" in (c.get("delta") or {}) else {})}
                          for c in event.get("choices") or []]
    return json.dumps(blanked)


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
async def test_stream_without_usage_keeps_the_fingerprint(real_fleet: RealFleet,
                                                          make_router: RouterFactory,
                                                          path: str, n: int) -> None:
    """kvroute asks the worker for the usage chunk and drops it again; the client still gets
    vLLM's own stream without include_usage: system_fingerprint on each finish chunk.

    n=1: the finish chunk is held until the usage chunk right behind it. n=2: the choices do
    not step together, so one may finish while the other still streams; its finish chunk is
    released with the fingerprint kvroute learnt from that worker's earlier answers, so the
    router first sends one ordinary request to each worker."""
    router = await make_router(ROUND_ROBIN_ROUTING)
    if n > 1:
        for _ in real_fleet.urls:
            status, _ = await post_json(router.url + "/v1/completions",
                                        {"model": MODEL, "prompt": "hi", "max_tokens": 1})
            assert status == 200
    prompt = ({"prompt": "hello world"} if path == "/v1/completions" else {"messages": MESSAGES})
    body = {"model": MODEL, **prompt, "max_tokens": 3, "n": n, "temperature": 1.0, "seed": 1,
            "stream": True, "ignore_eos": True}
    through = await stream_events(router.url + path, body)
    direct = await stream_events(real_fleet.urls[0] + path, body)
    assert through[-1] == direct[-1] == "[DONE]"
    assert all("usage" not in e for e in through[:-1])
    # each choice's last chunk (the finish chunk, with the fingerprint as its last key) is
    # what the engine sends; the interleaving of the choices varies from run to run
    for stream in (through, direct):
        last = {e["choices"][0]["index"]: e for e in stream[:-1] if e["choices"]}
        assert sorted(last) == list(range(n))
        assert all(e["choices"][0]["finish_reason"] == "length" for e in last.values())
        assert all(list(e)[-1] == "system_fingerprint" for e in last.values())
        assert all("system_fingerprint" not in e for e in stream[:-1]
                   if e["choices"][0]["finish_reason"] is None)
    assert {without_values(e) for e in through} == {without_values(e) for e in direct}
    assert through[-2]["system_fingerprint"] == direct[-2]["system_fingerprint"]


async def test_prompt_too_long_is_vllms_400(real_fleet: RealFleet, router: RouterHandle) -> None:
    body = {"model": MODEL, "prompt": "word " * 2100, "max_tokens": 4}
    status, direct = await post_json(real_fleet.urls[0] + "/v1/completions", body)
    assert status == 400
    with pytest.raises(openai.BadRequestError) as info:
        await client_for(router.url).completions.create(model=MODEL, prompt="word " * 2100,
                                                        max_tokens=4)
    assert info.value.status_code == 400
    assert info.value.body == direct["error"]
    assert "maximum context length is 2048 tokens" in direct["error"]["message"]


async def test_kvroutes_own_context_length_refusal_is_vllms_400(
        real_fleet: RealFleet, make_router: RouterFactory) -> None:
    """With the model's tokenizer and the context-length filter, kvroute refuses a prompt
    longer than the window itself (no worker is asked) with the engine's very body, and
    forwards a prompt that fits with a too-large ``max_tokens``, which the engine serves."""
    router = await make_router(prefix_routing(real_fleet.model_dir))
    body = {"model": MODEL, "prompt": "word " * 2100, "max_tokens": 4}
    status, direct = await post_json(real_fleet.urls[0] + "/v1/completions", body)
    assert status == 400
    async with aiohttp.ClientSession() as session, session.post(
            router.url + "/v1/completions", json=body) as resp:
        assert resp.status == 400
        assert resp.headers["x-kvroute-worker"] == "none"        # refused by kvroute itself
        through = await resp.json(content_type=None)
    assert through == direct
    assert direct["error"]["message"].startswith(
        "This model's maximum context length is 2048 tokens. However, your prompt contains")
    # past the window times the vocabulary's longest token: refused by its characters,
    # untokenized, by vLLM and by kvroute (a chat: its rendered text's characters)
    for path, body in (("/v1/completions", {"prompt": "word " * 8000}),
                       ("/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "word " * 8000}]})):
        body = {"model": MODEL, "max_tokens": 4, **body}
        status, direct = await post_json(real_fleet.urls[0] + path, body)
        assert status == 400 and direct["error"]["param"] == "input_text", direct
        async with aiohttp.ClientSession() as session, session.post(
                router.url + path, json=body) as resp:
            assert resp.status == 400
            assert resp.headers["x-kvroute-worker"] == "none"
            assert await resp.json(content_type=None) == direct
    for ids, asked in (([7] * 2100, 4), ([7] * 2049, 4), ([7] * 2048, 4), ([7] * 2100, 5000)):
        # counted whole, "at least" one past, one filling the window, max_tokens refused first
        body = {"model": MODEL, "prompt": ids, "max_tokens": asked}
        status, direct = await post_json(real_fleet.urls[0] + "/v1/completions", body)
        assert status == 400
        status, through = await post_json(router.url + "/v1/completions", body)
        assert (status, through) == (400, direct)
    body = {"model": MODEL, "prompt": "word " * 1000, "max_tokens": 1500, "temperature": 0}
    status, served = await post_json(real_fleet.urls[0] + "/v1/completions", body)
    assert status == 200
    status, routed = await post_json(router.url + "/v1/completions", body)
    assert status == 200
    assert routed["usage"]["prompt_tokens"] == served["usage"]["prompt_tokens"] == 1002


async def test_a_prompt_counted_past_the_window_by_another_tokenizer_is_the_engines_to_judge(
        real_fleet: RealFleet, make_router: RouterFactory) -> None:
    """The default routing file names no tokenizer of the model: kvroute counts with
    cl100k, which makes 2,400 tokens of a text the model's own tokenizer makes 1,202 of.
    The engine serves it, so must kvroute; a text too long by either count is the engine's
    400, relayed."""
    from policies.producers.tokens import DEFAULT_ENCODING, TiktokenTokenizer

    assert len(TiktokenTokenizer(DEFAULT_ENCODING).encode("Hello\n\n" * 1200)) == 2400
    router = await make_router((REPO_ROOT / "config/routing.yaml").read_text())
    body = {"model": MODEL, "prompt": "Hello\n\n" * 1200, "max_tokens": 4, "temperature": 0}
    status, served = await post_json(real_fleet.urls[0] + "/v1/completions", body)
    assert status == 200 and served["usage"]["prompt_tokens"] == 1202
    async with aiohttp.ClientSession() as session, session.post(
            router.url + "/v1/completions", json=body) as resp:
        assert resp.status == 200
        assert resp.headers["x-kvroute-worker"].startswith("cpu-")
        routed = await resp.json()
    assert routed["usage"] == served["usage"]
    body = {"model": MODEL, "prompt": "Hello\n\n" * 2100, "max_tokens": 4}
    status, direct = await post_json(real_fleet.urls[0] + "/v1/completions", body)
    assert status == 400
    async with aiohttp.ClientSession() as session, session.post(
            router.url + "/v1/completions", json=body) as resp:
        assert resp.status == 400
        assert resp.headers["x-kvroute-worker"].startswith("cpu-")
        through = await resp.json(content_type=None)
    assert through == direct
    assert direct["error"]["message"].startswith(
        "This model's maximum context length is 2048 tokens. However, your prompt contains")


async def test_unknown_model_is_a_404_naming_the_model(real_fleet: RealFleet,
                                                       router: RouterHandle) -> None:
    """kvroute answers an unknown model itself, with the body the engine would have sent."""
    for path, prompt in (("/v1/chat/completions", {"messages": MESSAGES}),
                         ("/v1/completions", {"prompt": "hello"})):
        body = {"model": "nope", **prompt, "max_tokens": 4}
        status, direct = await post_json(real_fleet.urls[0] + path, body)
        assert status == 404
        assert direct["error"]["type"] == "NotFoundError" and direct["error"]["code"] == 404
        assert direct["error"]["message"].startswith("The model `nope` does not exist.")
        through_status, through = await post_json(router.url + path, body)
        assert through_status == 404
        assert list(through) == list(direct) == ["error"]
        assert list(through["error"]) == list(direct["error"])      # same keys, same order
        assert through == direct            # one served model: the same "Valid aliases: tiny."
    with pytest.raises(openai.NotFoundError) as info:
        await client_for(router.url).chat.completions.create(
            model="nope", messages=MESSAGES, max_tokens=4)
    assert info.value.status_code == 404
    assert info.value.body == direct["error"]
