"""Anthropic's Messages API on the real engines: through kvroute with the ``anthropic``
client (whole, streamed, ``count_tokens``, an unknown model), and the emulator's bodies,
stream events and errors against the real engine's."""

from __future__ import annotations

import aiohttp
import anthropic

from router.keys import METRICS
from tests.real_vllm.conftest import MODEL, RealFleet, RouterFactory, prefix_routing
from tests.real_vllm.event_streams import assert_answers_alike, post
from tests.real_vllm.test_emulator_fidelity import paths
from tests.real_vllm.test_openai_client import ROUND_ROBIN_ROUTING
from workers.emulator.process import EmulatorProcess

BODY = {"model": MODEL, "max_tokens": 3, "system": "Be kind.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hi"}]}]}


async def test_the_anthropic_client_through_kvroute(real_fleet: RealFleet,
                                                    make_router: RouterFactory) -> None:
    router = await make_router(ROUND_ROBIN_ROUTING)
    client = anthropic.AsyncAnthropic(base_url=router.url, api_key="unused", max_retries=0)
    engines = set()
    for turn in range(2):
        raw = await client.messages.with_raw_response.create(
            model=MODEL, max_tokens=4, messages=[{"role": "user", "content": f"Hi ({turn})"}])
        message = await raw.parse()
        engines.add(raw.headers["x-kvroute-worker"])
        assert message.usage.output_tokens == 4 and message.stop_reason == "max_tokens"
    assert len(engines) == 2
    async with client.messages.stream(model=MODEL, max_tokens=3,
                                      messages=[{"role": "user", "content": "Hi"}]) as stream:
        final = await stream.get_final_message()
    assert final.usage.output_tokens == 3 and final.content[0].type == "text"
    counted = await client.messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}])
    assert counted.input_tokens == final.usage.input_tokens
    try:
        await client.messages.create(model="nope", max_tokens=2,
                                     messages=[{"role": "user", "content": "Hi"}])
    except anthropic.NotFoundError as error:
        assert error.body == {"type": "error", "error": {
            "type": "NotFoundError",
            "message": f"The model `nope` does not exist. Valid aliases: {MODEL}."}}
    else:
        raise AssertionError("an unknown model was served")
    await client.close()
    registry = router.app[METRICS].registry
    assert sum(registry.get_sample_value("kvroute_completion_tokens_total", {
        "worker": w.info.id, "gpu": w.info.gpu.name}) or 0.0
        for w in real_fleet.fleet.workers) == 2 * 4 + 3


async def test_the_emulator_answers_the_messages_api_as_vllm_does(
        real_fleet: RealFleet) -> None:
    engine = real_fleet.urls[0]
    with EmulatorProcess(gpu="l40s", model="llama-3-8b", served_model_names=[MODEL],
                         time_scale=0.01, emulate={"output_len": {
                             "dist": "fixed", "value": 64}}) as emulator:
        await assert_answers_alike(f"{engine}/v1/messages", f"{emulator.url}/v1/messages",
                                   BODY, event_key_order=True)
        counts = [await post(f"{url}/v1/messages/count_tokens",
                             {key: BODY[key] for key in ("model", "system", "messages")})
                  for url in (engine, emulator.url)]
        assert [(status, paths(body)) for status, body in counts] == [
            (200, paths(counts[0][1]))] * 2
        for url in (engine, emulator.url):
            status, error = await post(f"{url}/v1/messages", {**BODY, "model": "nope"})
            assert (status, error) == (404, {"type": "error", "error": {
                "type": "NotFoundError",
                "message": f"The model `nope` does not exist. Valid aliases: {MODEL}."}})
            status, error = await post(f"{url}/v1/messages",
                                       {key: BODY[key] for key in ("model", "messages")})
            assert status == 400 and error["error"]["param"] == "body.max_tokens"


async def test_the_router_counts_an_agents_turn_as_the_engine_does(
        real_fleet: RealFleet, make_router: RouterFactory) -> None:
    """Tool results, tool calls, several text blocks, a billing header and tools offered (the
    template is handed them; this one writes none): the router's count of the prompt (with
    the model's own tokenizer and template) is the engine's."""
    router = await make_router(prefix_routing(real_fleet.model_dir))
    client = anthropic.AsyncAnthropic(base_url=router.url, api_key="unused", max_retries=0)
    message = await client.messages.create(
        model=MODEL, max_tokens=2,
        tools=[{"name": "read_file", "description": "Read a file.",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
        tool_choice={"type": "none"},     # "auto" asks the engine for a tool-call parser
        system=[{"type": "text", "text": "x-anthropic-billing-header: cc=1; h=ab12"},
                {"type": "text", "text": "You read logs."}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "What is in the log?"},
                                         {"type": "text", "text": "Summarize it."}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Reading it."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file",
                 "input": {"path": "/var/log/app.log"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "disk full " * 40},
                             {"type": "text", "text": "retrying"}]}]}])
    await client.close()
    async with aiohttp.ClientSession() as session, session.get(
            f"{router.url}/debug/decisions?limit=1") as resp:
        [decision] = (await resp.json())["data"]
    assert message.usage.input_tokens > 80
    assert decision["num_prompt_tokens"] == message.usage.input_tokens
