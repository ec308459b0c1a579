"""``/v1/messages`` and ``/v1/messages/count_tokens`` of an emulated worker, in its own
process: whole and streamed messages in vLLM 0.32's shapes, and its errors (Anthropic's shape
for what vLLM translates, its usual 400 for a body that fails validation)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.workers.emulator.emulator_fixtures import MODEL, emulator
from workers.emulator.process import EmulatorProcess

pytestmark = pytest.mark.integration
STREAM_EVENTS = ["message_start", "content_block_start", "content_block_delta",
                 "content_block_stop", "message_delta", "message_stop"]


@pytest.fixture(scope="module")
def worker() -> Iterator[EmulatorProcess]:
    with emulator(time_scale=0.01, output_len={"dist": "fixed", "value": 3}) as proc:
        yield proc


async def post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        return resp.status, await resp.json(content_type=None)


def conversation(text: str) -> dict[str, Any]:
    return {"model": MODEL, "system": [{"type": "text", "text": "Be brief."}],
            "messages": [{"role": "user", "content": text}]}


async def test_a_whole_message_and_its_token_count(worker: EmulatorProcess) -> None:
    status, cut = await post(f"{worker.url}/v1/messages",
                             {**conversation("Tell me about dragons."), "max_tokens": 2})
    assert status == 200, cut
    assert list(cut) == ["id", "type", "role", "content", "model", "stop_reason", "usage"]
    assert cut["id"].startswith("chatcmpl-") and (cut["type"], cut["role"]) == ("message",
                                                                                "assistant")
    assert cut["stop_reason"] == "max_tokens" and cut["usage"]["output_tokens"] == 2
    assert cut["content"][0]["type"] == "text" and cut["content"][0]["text"]
    status, whole = await post(f"{worker.url}/v1/messages",
                               {**conversation("Tell me about dragons."), "max_tokens": 50})
    assert whole["stop_reason"] == "end_turn" and whole["usage"]["output_tokens"] == 3
    status, counted = await post(f"{worker.url}/v1/messages/count_tokens",
                                 conversation("Tell me about dragons."))
    assert status == 200
    assert counted == {"input_tokens": whole["usage"]["input_tokens"],
                       "context_management": {
                           "original_input_tokens": whole["usage"]["input_tokens"]}}


async def test_a_stream_sends_anthropics_events(worker: EmulatorProcess) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    async with aiohttp.ClientSession() as session, session.post(
            f"{worker.url}/v1/messages", headers={"X-Request-Id": "mine"},
            json={**conversation("Stream it."), "max_tokens": 50, "stream": True}) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        for block in (await resp.text()).split("\n\n"):
            if block:
                kind, data = block.split("\n")
                assert kind.startswith("event: ") and data.startswith("data: ")
                payload = json.loads(data[6:])
                assert payload["type"] == kind[7:]
                events.append((kind[7:], payload))
    kinds = [kind for kind, _ in events]
    assert [k for i, k in enumerate(kinds) if k != "content_block_delta"
            or kinds[i - 1] != "content_block_delta"] == STREAM_EVENTS
    start, delta = events[0][1]["message"], events[-2][1]
    assert start["id"] == "chatcmpl-mine" and start["usage"]["output_tokens"] == 0
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"] == {"input_tokens": start["usage"]["input_tokens"],
                              "output_tokens": 3}
    text = "".join(p["delta"]["text"] for k, p in events if k == "content_block_delta")
    assert text


async def test_errors(worker: EmulatorProcess) -> None:
    status, unknown = await post(f"{worker.url}/v1/messages",
                                 {**conversation("x"), "model": "other", "max_tokens": 2})
    assert status == 404
    assert unknown == {"type": "error", "error": {
        "type": "NotFoundError",
        "message": f"The model `other` does not exist. Valid aliases: {MODEL}."}}
    status, too_long = await post(f"{worker.url}/v1/messages",
                                  {**conversation("word " * 20_000), "max_tokens": 2})
    assert status == 400 and too_long["type"] == "error"
    assert too_long["error"]["type"] == "BadRequestError"
    assert "maximum context length" in too_long["error"]["message"]
    status, too_many = await post(f"{worker.url}/v1/messages",
                                  {**conversation("x"), "max_tokens": 100_000})
    assert status == 400 and too_many["error"]["message"].startswith(
        "max_completion_tokens=100000 cannot be greater than max_model_len=")   # vLLM's chat
    status, missing = await post(f"{worker.url}/v1/messages", conversation("x"))
    assert status == 400 and missing["error"]["type"] == "Bad Request"     # vLLM's own shape
    assert missing["error"]["param"] == "body.max_tokens"
    status, image = await post(f"{worker.url}/v1/messages", {
        "model": MODEL, "max_tokens": 2,
        "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})
    assert status == 400
    assert "takes text and tool_result and tool_use blocks only" in image["error"]["message"]


async def test_a_whole_float_is_a_max_tokens_as_in_vllm(worker: EmulatorProcess) -> None:
    """pydantic's lax int takes 2.0: the emulator answered 400 int_type where vLLM answers."""
    status, cut = await post(f"{worker.url}/v1/messages",
                             {**conversation("Tell me about dragons."), "max_tokens": 2.0})
    assert status == 200 and cut["usage"]["output_tokens"] == 2
    status, error = await post(f"{worker.url}/v1/messages",
                               {**conversation("x"), "max_tokens": 2.5})
    assert status == 400 and "int" in str(error)


@pytest.mark.parametrize("max_tokens", [0, -1])
async def test_a_max_tokens_below_one_is_refused_as_vllm_refuses_it(
        worker: EmulatorProcess, max_tokens: int) -> None:
    """vLLM's Messages request model wants a positive max_tokens; the emulator generated
    one token."""
    status, error = await post(f"{worker.url}/v1/messages",
                               {**conversation("x"), "max_tokens": max_tokens})
    assert (status, error) == (400, {"error": {
        "message": "1 validation error:\n  {'type': 'value_error', 'loc': 'body.max_tokens', "
                   "'msg': 'Value error, max_tokens must be positive', 'input': "
                   f"'{max_tokens}', 'ctx': {{'error': ValueError('max_tokens must be "
                   "positive')}}",
        "type": "Bad Request", "param": "body.max_tokens", "code": 400}})
