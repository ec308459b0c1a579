"""``/v1/responses`` of an emulated worker, in its own process: whole and streamed answers,
continuation with ``previous_response_id`` on the worker that kept the response only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.workers.emulator.emulator_fixtures import MODEL, emulator
from workers.emulator.process import EmulatorProcess

pytestmark = pytest.mark.integration
STREAM_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
                 "response.content_part.added", "response.output_text.delta",
                 "response.output_text.done", "response.content_part.done",
                 "response.output_item.done", "response.completed"]


@pytest.fixture(scope="module")
def keeper() -> Iterator[EmulatorProcess]:
    with emulator(time_scale=0.01, responses_store=True) as proc:
        yield proc


async def post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        return resp.status, await resp.json(content_type=None)


async def get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_a_kept_response_is_read_back_and_continued(keeper: EmulatorProcess) -> None:
    status, first = await post(f"{keeper.url}/v1/responses", {
        "model": MODEL, "input": "Tell me a story about a dragon and a knight. " * 4,
        "max_output_tokens": 4, "request_id": "resp_mine"})
    assert status == 200, first
    assert (first["id"], first["object"], first["status"]) == ("resp_mine", "response",
                                                               "incomplete")
    assert first["incomplete_details"] == {"reason": "max_output_tokens"}
    assert first["usage"]["output_tokens"] == 4
    assert first["output"][0]["content"][0]["type"] == "output_text"
    assert await get(f"{keeper.url}/v1/responses/resp_mine") == (200, first)
    status, second = await post(f"{keeper.url}/v1/responses", {
        "model": MODEL, "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "And then?"}]}],
        "previous_response_id": "resp_mine", "max_output_tokens": 2})
    assert status == 200, second
    assert second["previous_response_id"] == "resp_mine"
    # the earlier turn and its answer come first: a longer prompt, its prefix cached
    # (instructions are not carried over, as in OpenAI's API)
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"] + 4
    assert second["usage"]["input_tokens_details"]["cached_tokens"] > 0
    status, error = await post(f"{keeper.url}/v1/responses/resp_mine/cancel", {})
    assert (status, error["error"]["message"]) == (400, "Cannot cancel a synchronous response.")


async def test_the_stream_has_vllms_events_and_ends_with_the_response(
        keeper: EmulatorProcess) -> None:
    async with aiohttp.ClientSession() as session, session.post(
            f"{keeper.url}/v1/responses", json={"model": MODEL, "input": "hi", "stream": True,
                                                "max_output_tokens": 3}) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        text = (await resp.read()).decode()
    events = [block.split("\n") for block in text.strip().split("\n\n")]
    kinds = [lines[0].removeprefix("event: ") for lines in events]
    payloads = [json.loads(lines[1].removeprefix("data: ")) for lines in events]
    assert [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]] == STREAM_EVENTS
    assert [p["sequence_number"] for p in payloads] == list(range(len(events)))
    assert all(p["type"] == k for p, k in zip(payloads, kinds, strict=True))
    done = payloads[-1]["response"]
    deltas = "".join(p["delta"] for p in payloads if p["type"] == "response.output_text.delta")
    assert done["output"][0]["content"][0]["text"] == deltas
    assert done["usage"]["output_tokens"] == 3
    assert await get(f"{keeper.url}/v1/responses/{done['id']}") == (200, done)


async def test_without_the_store_nothing_is_kept_as_in_vllm(keeper: EmulatorProcess) -> None:
    with emulator(time_scale=0.01) as plain:
        status, answer = await post(f"{plain.url}/v1/responses", {"model": MODEL, "input": "x",
                                                                  "max_output_tokens": 2})
        assert status == 200, answer
        missing = f"Response with id '{answer['id']}' not found."
        status, error = await get(f"{plain.url}/v1/responses/{answer['id']}")
        assert (status, error["error"]["message"]) == (404, missing)
        status, error = await post(f"{plain.url}/v1/responses", {
            "model": MODEL, "input": "x", "background": True})
        assert status == 400 and "VLLM_ENABLE_RESPONSES_API_STORE" in error["error"]["message"]
    # a response made by another worker is not known here
    status, error = await post(f"{keeper.url}/v1/responses", {
        "model": MODEL, "input": "x", "previous_response_id": answer["id"]})
    assert (status, error["error"]["message"]) == (404, missing)
    assert error["error"]["param"] == "response_id"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("field", ["temperature", "top_p"])
async def test_a_sampling_value_that_is_not_a_number_is_a_400(keeper: EmulatorProcess,
                                                              field: str, stream: bool) -> None:
    """vLLM's request model types them as floats: a 400 before any work (it was a 500, which
    a router takes for the worker's failure, retries elsewhere and counts towards ejection)."""
    status, error = await post(f"{keeper.url}/v1/responses", {
        "model": MODEL, "input": "hi", "max_output_tokens": 2, "stream": stream, field: "x"})
    assert status == 400, error
    assert error["error"]["param"] == f"body.{field}"
    assert "Input should be a valid number" in error["error"]["message"]
    status, answer = await post(f"{keeper.url}/v1/responses", {
        "model": MODEL, "input": "hi", "max_output_tokens": 2, field: 0.5})
    assert (status, answer[field]) == (200, 0.5)


async def test_a_whole_float_is_a_max_output_tokens_as_in_vllm(keeper: EmulatorProcess) -> None:
    status, answer = await post(f"{keeper.url}/v1/responses", {
        "model": MODEL, "input": "hi", "max_output_tokens": 2.0})
    assert status == 200 and answer["usage"]["output_tokens"] == 2
    assert answer["max_output_tokens"] == 2
