"""The Responses API on the two real engines (VLLM_ENABLE_RESPONSES_API_STORE=1): through
kvroute a conversation stays on the engine holding it, which the other engine cannot
continue; and the emulator's bodies and stream events have the real engine's keys."""

from __future__ import annotations

import openai

from tests.real_vllm.conftest import MODEL, RealFleet, RouterFactory
from tests.real_vllm.event_streams import assert_answers_alike, post
from tests.real_vllm.test_openai_client import ROUND_ROBIN_ROUTING
from workers.emulator.process import EmulatorProcess


async def test_a_conversation_through_kvroute_stays_on_its_engine(
        real_fleet: RealFleet, make_router: RouterFactory) -> None:
    router = await make_router(ROUND_ROBIN_ROUTING)       # alone, it would alternate engines
    client = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)
    raw = await client.responses.with_raw_response.create(
        model=MODEL, input="Tell me about rivers.", max_output_tokens=4)
    owner, previous = raw.headers["x-kvroute-worker"], raw.parse()
    for turn in range(3):
        raw = await client.responses.with_raw_response.create(
            model=MODEL, input=f"More ({turn}).", max_output_tokens=4,
            previous_response_id=previous.id)
        answer = raw.parse()
        assert raw.headers["x-kvroute-worker"] == owner
        assert answer.previous_response_id == previous.id
        previous = answer
    async with await client.responses.create(model=MODEL, input="Last one.",
                                             max_output_tokens=3, stream=True,
                                             previous_response_id=previous.id) as events:
        kinds = [event.type async for event in events]
    assert kinds[-1] == "response.completed"
    assert (await client.responses.retrieve(previous.id)).id == previous.id
    await client.close()
    other = next(url for worker, url in zip(
        (w.info.id for w in real_fleet.fleet.workers), real_fleet.urls, strict=True)
        if worker != owner)
    status, error = await post(f"{other}/v1/responses", {
        "model": MODEL, "input": "x", "previous_response_id": previous.id})
    assert (status, error["error"]["message"]) == (
        404, f"Response with id '{previous.id}' not found.")


async def test_the_emulator_answers_the_responses_api_as_vllm_does(
        real_fleet: RealFleet) -> None:
    engine = real_fleet.urls[0]
    body = {"model": MODEL, "input": "Say hi", "instructions": "Be kind.",
            "max_output_tokens": 3}
    with EmulatorProcess(gpu="l40s", model="llama-3-8b", served_model_names=[MODEL],
                         time_scale=0.01, emulate={"responses_store": True, "output_len": {
                             "dist": "fixed", "value": 64}}) as emulator:
        await assert_answers_alike(f"{engine}/v1/responses", f"{emulator.url}/v1/responses",
                                   body)
        for url in (engine, emulator.url):
            status, error = await post(f"{url}/v1/responses", {
                "model": MODEL, "input": "x", "previous_response_id": "resp_nope"})
            assert (status, error) == (404, {"error": {
                "message": "Response with id 'resp_nope' not found.",
                "type": "invalid_request_error", "param": "response_id", "code": 404}})
