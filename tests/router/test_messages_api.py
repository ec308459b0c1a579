"""Anthropic's Messages API (``/v1/messages``, which vLLM serves) through the router, with the
official ``anthropic`` client: whole and streamed messages routed by the policy and counted,
``count_tokens``, errors in Anthropic's shape, and a stream the worker breaks.

The fleet: the router suite's emulated workers (``tests/router/conftest.py``), in their own
process."""

from __future__ import annotations

import aiohttp
import anthropic
import pytest

from router.loop_lag import LoopStalls
from tests.router.gateway_support import MODEL, ROUTING_ROUND_ROBIN, RouterFactory, subset
from workers.fleet import FleetConfig

pytestmark = pytest.mark.integration
FAST_WORKERS = ["h100-fast", "a100-fast"]
GPUS = {"h100-fast": "H100-80GB", "a100-fast": "A100-80GB"}


def client_of(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key="sk-test", max_retries=0)


async def test_messages_are_routed_by_the_policy_and_counted(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, FAST_WORKERS), ROUTING_ROUND_ROBIN)
    client = client_of(router.url)
    workers = set()
    for turn in range(4):
        raw = await client.messages.with_raw_response.create(
            model=MODEL, max_tokens=5, system="Answer briefly.",
            messages=[{"role": "user", "content": f"Tell me about the sea ({turn})."}])
        message = await raw.parse()
        workers.add(raw.headers["x-kvroute-worker"])
        # the id also where Anthropic's clients read it
        assert raw.headers["request-id"] == raw.headers["x-request-id"]
        assert message._request_id == raw.headers["x-request-id"]
        assert raw.headers["x-kvroute-reason"]
        assert message.type == "message" and message.role == "assistant"
        assert message.id.startswith("chatcmpl-") and message.model == MODEL
        assert message.stop_reason == "max_tokens" and message.content[0].type == "text"
        assert message.usage.output_tokens == 5 and message.usage.input_tokens > 10
    assert workers == set(FAST_WORKERS)          # round-robin spread them
    output = sum(router.metric("kvroute_completion_tokens_total", worker=w, gpu=gpu)
                 for w, gpu in GPUS.items())
    prompts = sum(router.metric("kvroute_prompt_tokens_total", worker=w, gpu=gpu)
                  for w, gpu in GPUS.items())
    assert output == 4 * 5 and prompts == 4 * message.usage.input_tokens
    counted = await client.messages.count_tokens(
        model=MODEL, system="Answer briefly.",
        messages=[{"role": "user", "content": "Tell me about the sea (3)."}])
    assert counted.input_tokens == message.usage.input_tokens
    await client.close()


async def test_a_stream_is_relayed_whole_and_its_tokens_counted(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a loop stalled 0.5 s (a loaded machine) drops a request's times, by design
    # (test_loop_lag.py): this test asserts them
    monkeypatch.setattr(LoopStalls, "since", lambda self, start: False)
    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    client = client_of(router.url)
    kinds = []
    async with client.messages.stream(
            model=MODEL, max_tokens=6,
            messages=[{"role": "user", "content": [{"type": "text", "text": "Stream, please."}]}],
    ) as stream:
        async for event in stream:
            kinds.append(event.type)
        final = await stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_delta" in kinds and "message_delta" in kinds
    assert final.usage.output_tokens == 6 and final.stop_reason == "max_tokens"
    assert final.content[0].type == "text" and final.content[0].text
    await client.close()
    assert router.metric("kvroute_completion_tokens_total", worker="h100-fast",
                         gpu="H100-80GB") == 6
    assert router.metric("kvroute_prompt_tokens_total", worker="h100-fast",
                         gpu="H100-80GB") == final.usage.input_tokens
    # the first token is the first content_block_delta, not message_start
    assert router.metric("kvroute_ttft_seconds_count", worker="h100-fast", gpu="H100-80GB") == 1
    # message_stop ends it: a whole stream, not one the worker broke
    assert router.metric("kvroute_requests_total", model=MODEL, worker="h100-fast",
                         gpu="H100-80GB", profile="default", status="200") == 1


async def test_errors_take_anthropics_shape_and_the_router_keeps_serving(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, FAST_WORKERS))
    client = client_of(router.url)
    with pytest.raises(anthropic.NotFoundError) as missing:
        await client.messages.create(model="no-such-model", max_tokens=5,
                                     messages=[{"role": "user", "content": "hi"}])
    assert missing.value.request_id == missing.value.response.headers["x-request-id"]
    assert missing.value.body == {"type": "error", "error": {
        "type": "NotFoundError",
        "message": f"The model `no-such-model` does not exist. Valid aliases: {MODEL}."}}
    async with aiohttp.ClientSession() as session:
        cases = {
            b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}]}'
            % MODEL.encode(): "max_tokens",
            b'{"model": "%s", "max_tokens": 5, "messages": []}' % MODEL.encode(): "messages",
            b'{"model": "%s", "max_tokens": 5, "messages": [{"role": "user", "content": 7}]}'
            % MODEL.encode(): "messages[0].content",
            b'{"model": "%s", "max_tokens": 5, "system": 3, "messages": []}'
            % MODEL.encode(): "system",
            b'{"model": ': "not valid JSON",
        }
        for body, named in cases.items():
            async with session.post(f"{router.url}/v1/messages", data=body,
                                    headers={"Content-Type": "application/json"}) as resp:
                error = await resp.json()
            assert resp.status == 400, body
            assert error["type"] == "error", error
            assert error["error"]["type"] == "invalid_request_error"
            assert named in error["error"]["message"]
        async with session.post(f"{router.url}/v1/messages/nothing", json={}) as resp:
            assert (resp.status, (await resp.json())["error"]["type"]) == (404, "not_found_error")
    answer = await client.messages.create(model=MODEL, max_tokens=2,
                                          messages=[{"role": "user", "content": "still there?"}])
    assert answer.usage.output_tokens == 2
    await client.close()


async def test_a_stream_the_worker_breaks_ends_with_an_anthropic_error_event(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["stall"]), upstream_timeout_s=0.5)
    client = client_of(router.url)
    kinds = []
    with pytest.raises(anthropic.APIStatusError) as info:
        async with client.messages.stream(
                model=MODEL, max_tokens=50,
                messages=[{"role": "user", "content": "Keep going."}]) as stream:
            async for event in stream:
                kinds.append(event.type)
    assert "mid-stream: nothing came for 0.5 s" in str(info.value)
    assert kinds[0] == "message_start" and "content_block_delta" in kinds
    assert router.metric("kvroute_requests_total", model=MODEL, worker="stall",
                         gpu="H100-80GB", profile="default", status="504") == 1.0
    await client.close()


async def test_the_api_key_header_names_the_tenant(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    client = client_of(router.url)
    await client.messages.create(model=MODEL, max_tokens=2,
                                 messages=[{"role": "user", "content": "hi"}])
    await client.close()
    async with aiohttp.ClientSession() as session, session.get(
            f"{router.url}/metrics") as resp:
        text = await resp.text()
    tenants = {line.split('tenant="')[1].split('"')[0] for line in text.splitlines()
               if line.startswith("kvroute_cost_dollars_total{")}
    assert len(tenants) == 1 and next(iter(tenants)).startswith("key-")


async def test_an_agents_tool_results_are_counted_as_the_worker_counts_them(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """An agent's turn is mostly tool results: the router counted only text blocks (87 tokens
    for a turn of about 10,000), so a prompt past the window passed its filter and a long
    prefill was routed as a short one. The router's count is now the worker's own."""
    router = await make_router(subset(emulated_fleet, ["h100-fast"]))     # counts tokens
    client = client_of(router.url)
    messages: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": [{"type": "text", "text": "What is in the log?"},
                                     {"type": "text", "text": "Summarize it."}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Reading it."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file",
             "input": {"path": "/var/log/app.log"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1",
             "content": [{"type": "text", "text": "lorem ipsum " * 1500}]}]},
    ]
    system: list[anthropic.types.TextBlockParam] = [
        {"type": "text", "text": "x-anthropic-billing-header: cc=1; h=ab12"},
        {"type": "text", "text": "You read logs."}]
    tools: list[anthropic.types.ToolParam] = [{
        "name": "read_file", "description": "Read a file of the host " * 20,
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
    counted = []
    for offered in ([], tools):
        raw = await client.messages.with_raw_response.create(
            model=MODEL, max_tokens=2, messages=messages, system=system, tools=offered)
        message = await raw.parse()
        assert message.usage.input_tokens > 3000
        async with aiohttp.ClientSession() as session, session.get(
                f"{router.url}/debug/decisions?limit=1") as resp:
            [decision] = (await resp.json())["data"]
        assert decision["num_prompt_tokens"] == message.usage.input_tokens
        counted.append(message.usage.input_tokens)
        count = await client.messages.count_tokens(model=MODEL, messages=messages,
                                                   system=system, tools=offered)
        assert count.input_tokens == message.usage.input_tokens
    assert counted[1] > counted[0] + 100           # the tools' definitions are in the prompt
    await client.close()
