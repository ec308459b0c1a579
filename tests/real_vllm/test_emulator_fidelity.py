"""Fidelity: the emulator and real vLLM get the same requests; every response field, stream
event shape, error field and core metric family real vLLM has must be in the emulator's."""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
import msgpack
import pytest
import zmq

from tests.real_vllm.conftest import MODEL, RealFleet
from tests.real_vllm.engine_metrics import cache_config, families, scrape
from workers.emulator.process import EmulatorProcess
from workers.ports import free_port

MESSAGES = [{"role": "user", "content": "Say something."}]
CORE_FAMILIES = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:cache_config_info", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
    "vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens",
    "vllm:request_success", "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds", "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens", "vllm:iteration_tokens_total",
    "vllm:prompt_tokens_cached_by_source", "vllm:admission_rejections",
)


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorProcess]:
    with EmulatorProcess(gpu="l40s", model="llama-3-8b", served_model_names=[MODEL],
                         time_scale=0.01, extra_args=["--max-model-len", "2048"]) as process:
        yield process


async def call(url: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    """Status and decoded body; a stream becomes its list of ``data:`` events."""
    async with aiohttp.ClientSession() as session, session.post(url + path, json=body) as resp:
        if not resp.headers.get("content-type", "").startswith("text/event-stream"):
            return resp.status, await resp.json(content_type=None)
        events: list[Any] = []
        async for raw in resp.content:
            line = raw.decode().strip()
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
        return resp.status, events


def paths(value: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON value (list items merged under ``[]``)."""
    out: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            out.add(prefix + key)
            out |= paths(item, prefix + key + ".")
    elif isinstance(value, list):
        for item in value:
            out |= paths(item, prefix + "[].")
    return out


def missing(real: Any, emulated: Any) -> set[str]:
    return paths(real) - paths(emulated)


def stream_kinds(events: list[Any]) -> dict[str, Any]:
    """The events by role: first, content, finish, usage; and the terminator."""
    kinds: dict[str, Any] = {"done": events[-1]}
    chunks = [e for e in events if isinstance(e, dict)]
    kinds["first"] = chunks[0]
    finishing = [c for c in chunks if c.get("choices") and c["choices"][0].get("finish_reason")]
    kinds["finish"] = finishing[0] if finishing else None
    middle = [c for c in chunks[1:] if c.get("choices") and c not in finishing]
    kinds["content"] = middle[0] if middle else None
    usage = [c for c in chunks if not c.get("choices") and "usage" in c]
    kinds["usage"] = usage[0] if usage else None
    return kinds


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 5}),
    ("/v1/completions", {"prompt": "hello world", "max_tokens": 5}),
])
async def test_response_fields(real_fleet: RealFleet, emulator: EmulatorProcess, path: str,
                               body: dict[str, Any]) -> None:
    body = {"model": MODEL, "temperature": 0, **body}
    real_status, real = await call(real_fleet.urls[0], path, body)
    emu_status, emu = await call(emulator.url, path, body)
    assert real_status == emu_status == 200
    assert missing(real, emu) == set()


@pytest.mark.parametrize("include_usage", [True, False])
@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 5}),
    ("/v1/completions", {"prompt": "hello world", "max_tokens": 5}),
])
async def test_stream_event_shapes(real_fleet: RealFleet, emulator: EmulatorProcess, path: str,
                                   body: dict[str, Any], include_usage: bool) -> None:
    body = {"model": MODEL, "temperature": 0, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": include_usage}, **body}
    _, real = await call(real_fleet.urls[0], path, body)
    _, emu = await call(emulator.url, path, body)
    real_kinds, emu_kinds = stream_kinds(real), stream_kinds(emu)
    assert real_kinds["done"] == emu_kinds["done"] == "[DONE]"
    for kind, event in real_kinds.items():
        if isinstance(event, dict):
            assert isinstance(emu_kinds[kind], dict), f"{kind} event missing"
            assert missing(event, emu_kinds[kind]) == set(), kind


@pytest.mark.parametrize(("path", "body", "status"), [
    ("/v1/chat/completions", {"model": "nope", "messages": MESSAGES}, 404),
    ("/v1/completions", {"model": MODEL, "prompt": "word " * 2100, "max_tokens": 4}, 400),
])
async def test_error_fields(real_fleet: RealFleet, emulator: EmulatorProcess, path: str,
                            body: dict[str, Any], status: int) -> None:
    real_status, real = await call(real_fleet.urls[0], path, body)
    emu_status, emu = await call(emulator.url, path, body)
    assert real_status == emu_status == status
    assert missing(real, emu) == set()
    assert real["error"]["type"] == emu["error"]["type"]


CHAT_HI = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {}}}}]


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {**CHAT_HI, "temperature": -1}),
    ("/v1/chat/completions", {**CHAT_HI, "top_p": 5}),
    ("/v1/chat/completions", {**CHAT_HI, "top_k": -5}),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2, "top_k": -5}),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2, "suffix": "x"}),
    ("/v1/messages", {**CHAT_HI, "temperature": -1}),
    ("/v1/messages", {**CHAT_HI, "top_p": 5}),
    ("/v1/messages", {**CHAT_HI, "top_k": -5}),
    ("/v1/messages", {**CHAT_HI, "stop_sequences": "x"}),
    ("/v1/chat/completions", {**CHAT_HI, "temperature": 1000}),
    ("/v1/chat/completions", {**CHAT_HI, "presence_penalty": 5}),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2,
                         "frequency_penalty": -5}),
    ("/v1/chat/completions", {**CHAT_HI, "repetition_penalty": 0}),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2, "min_p": 2}),
    ("/v1/chat/completions", {**CHAT_HI, "n": 2, "temperature": 0}),
    ("/v1/chat/completions", {**CHAT_HI, "stop": ""}),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2, "stop": ["a", ""]}),
    ("/v1/chat/completions", {**CHAT_HI, "stop": ["a", "e", " ", "o", "i"]}),
    ("/v1/chat/completions", {**CHAT_HI, "stop": 5}),
    ("/v1/chat/completions", {**CHAT_HI, "stop": [1]}),
    ("/v1/chat/completions", {**CHAT_HI, "temperature": "nan"}),
    ("/v1/chat/completions", {**CHAT_HI, "repetition_penalty": "inf"}),
    ("/v1/chat/completions", {**CHAT_HI, "min_p": "x"}),
    ("/v1/chat/completions", {**CHAT_HI, "top_logprobs": 2}),
    ("/v1/chat/completions", {**CHAT_HI, "logprobs": True, "top_logprobs": 100}),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2, "logprobs": 50}),
    ("/v1/chat/completions", {**CHAT_HI, "min_tokens": 10}),
    ("/v1/chat/completions", {**CHAT_HI, "max_tokens": 0}),
    ("/v1/chat/completions", {**CHAT_HI, "max_tokens": -1}),
    ("/v1/chat/completions", {**CHAT_HI, "n": 0}),
    ("/v1/chat/completions", {**CHAT_HI, "stream_options": {"include_usage": True}}),
    ("/v1/completions", {"model": MODEL, "max_tokens": 2}),
    ("/v1/completions", {"model": MODEL, "prompt": None, "max_tokens": 2}),
    ("/v1/completions", {"model": MODEL, "prompt": "", "max_tokens": 2}),
    ("/v1/completions", {"model": MODEL, "prompt": [], "max_tokens": 2}),
    ("/v1/completions", {"model": MODEL, "prompt": [[]], "max_tokens": 2}),
    ("/v1/completions", {"model": MODEL, "prompt": [10 ** 9], "max_tokens": 2}),
    ("/v1/responses", {"model": MODEL, "input": "hi", "max_output_tokens": 0}),
    ("/v1/chat/completions", {**CHAT_HI, "tool_choice": "auto"}),
    ("/v1/chat/completions", {**CHAT_HI, "tools": []}),
    ("/v1/chat/completions", {**CHAT_HI, "tools": TOOLS, "tool_choice": "maybe"}),
    ("/v1/chat/completions", {**CHAT_HI, "tools": TOOLS,
                              "tool_choice": {"type": "function"}}),
    ("/v1/chat/completions", {**CHAT_HI, "tools": TOOLS,
                              "tool_choice": {"type": "function", "function": {}}}),
    ("/v1/chat/completions", {**CHAT_HI, "tools": TOOLS,
                              "tool_choice": {"type": "function", "function": {"name": ""}}}),
    ("/v1/chat/completions", {**CHAT_HI, "tools": TOOLS,
                              "tool_choice": {"type": "function",
                                              "function": {"name": "other"}}}),
    ("/v1/chat/completions", {**CHAT_HI, "stream": True, "prompt_logprobs": 1}),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2,
                         "prompt_logprobs": -2}),
    ("/v1/chat/completions", {**CHAT_HI, "prompt_logprobs": "x"}),
    ("/v1/chat/completions", {**CHAT_HI, "prompt_logprobs": 50}),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2, "logprobs": -2}),
    ("/v1/chat/completions", {**CHAT_HI, "logprobs": True, "top_logprobs": -2}),
    ("/v1/chat/completions", {**CHAT_HI, "logprobs": True, "top_logprobs": "x"}),
    ("/v1/chat/completions", {**CHAT_HI, "continue_final_message": True,
                              "add_generation_prompt": True}),
    ("/v1/chat/completions", {**CHAT_HI, "continue_final_message": True}),
    ("/v1/chat/completions", {**CHAT_HI, "messages": []}),
    ("/v1/chat/completions", {**CHAT_HI, "response_format": {"type": "json_schema"}}),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2,
                         "response_format": {"type": "json_schema"}}),
    ("/v1/chat/completions", {**CHAT_HI, "logit_bias": {"abc": 1}}),
    ("/v1/chat/completions", {**CHAT_HI, "logit_bias": [1]}),
    ("/v1/chat/completions", {**CHAT_HI, "stop_token_ids": "x"}),
    ("/v1/chat/completions", {**CHAT_HI, "allowed_token_ids": []}),
    ("/v1/chat/completions", {**CHAT_HI, "allowed_token_ids": [999999]}),
    ("/v1/chat/completions", {**CHAT_HI, "user": 5}),
    ("/v1/chat/completions", {**CHAT_HI, "seed": 1.5}),
    ("/v1/chat/completions", {**CHAT_HI, "max_tokens": 2.5}),
    ("/v1/chat/completions", {**CHAT_HI, "model": 5}),
    ("/v1/chat/completions", {**CHAT_HI, "stream": True, "stream_options": [1]}),
    ("/v1/messages", {**CHAT_HI, "max_tokens": 0}),
    ("/v1/messages", {"model": MODEL, "messages": CHAT_HI["messages"]}),
], ids=["chat-temperature", "chat-top_p", "chat-top_k", "completions-top_k", "suffix",
        "messages-temperature", "messages-top_p", "messages-top_k", "messages-stop",
        "temperature-past-2", "presence_penalty", "frequency_penalty", "repetition_penalty",
        "min_p", "greedy-n", "empty-stop", "empty-stop-in-list", "five-stops", "stop-number",
        "stop-list-of-numbers", "temperature-nan", "repetition_penalty-inf", "min_p-not-a-number",
        "top_logprobs-alone", "top_logprobs-past-20", "logprobs-past-20", "min_tokens-past-max",
        "max_tokens-0", "max_tokens-negative", "n-0", "stream_options-alone", "no-prompt",
        "null-prompt", "empty-prompt", "no-prompts", "empty-token-ids", "token-out-of-vocab",
        "max_output_tokens-0", "tool_choice-without-tools", "no-tools", "tool_choice-unknown",
        "tool_choice-no-function", "tool_choice-no-name", "tool_choice-empty-name",
        "tool_choice-other-tool", "prompt_logprobs-streamed", "prompt_logprobs-negative",
        "prompt_logprobs-text", "prompt_logprobs-past-20", "logprobs-negative",
        "top_logprobs-negative", "top_logprobs-text", "continue_final_message-and-prompt",
        "continue_final_message-default-prompt", "no-messages", "json_schema-missing",
        "completions-json_schema-missing", "logit_bias-key-not-int", "logit_bias-list",
        "stop_token_ids-text", "allowed_token_ids-empty", "allowed_token_ids-out-of-vocab",
        "user-not-text", "seed-fraction", "max_tokens-fraction", "model-not-text",
        "stream_options-list", "messages-max_tokens-0", "messages-no-max_tokens"])
async def test_refused_sampling_parameters_are_refused_in_vllms_words(
        real_fleet: RealFleet, emulator: EmulatorProcess, path: str,
        body: dict[str, Any]) -> None:
    """The emulator served what vLLM refuses (top_k, suffix, the Messages API's sampling
    fields), and worded the rest without vLLM's (parameter=…, value=…)."""
    real = await call(real_fleet.urls[0], path, body)
    emulated = await call(emulator.url, path, body)
    assert real[0] == 400 and emulated == real


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 5000}),
    ("/v1/chat/completions", {**CHAT_HI, "max_tokens": 5000}),
    ("/v1/chat/completions", {**CHAT_HI, "max_completion_tokens": 5000}),
    ("/v1/messages", {**CHAT_HI, "max_tokens": 5000}),
    ("/v1/responses", {"model": MODEL, "input": "hi", "max_output_tokens": 5000}),
    ("/v1/completions", {"model": MODEL, "prompt": "word " * 2100, "max_tokens": 5000}),
    ("/v1/completions", {"model": MODEL, "prompt": "word " * 2100, "max_tokens": 4}),
    ("/v1/chat/completions", {"model": MODEL, "max_tokens": 4,
                              "messages": [{"role": "user", "content": "word " * 2100}]}),
    ("/v1/messages", {"model": MODEL, "max_tokens": 4,
                      "messages": [{"role": "user", "content": "word " * 2100}]}),
    ("/v1/completions", {"model": MODEL, "prompt": [7] * 2100, "max_tokens": 4}),
    ("/v1/completions", {"model": MODEL, "prompt": [[7] * 2100, [8] * 5], "max_tokens": 4}),
    ("/v1/completions", {"model": MODEL, "prompt": [7] * 2048, "max_tokens": 4}),
    ("/v1/completions", {"model": MODEL, "prompt": [7] * 2049, "max_tokens": 4}),
    ("/v1/completions", {"model": MODEL, "prompt": [[7] * 2048, [8] * 2053], "max_tokens": 4}),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2, "cache_salt": ""}),
    ("/v1/chat/completions", {**CHAT_HI, "cache_salt": "a@b"}),
    ("/v1/chat/completions", {**CHAT_HI, "cache_salt": "s" * 129}),
    ("/v1/chat/completions", {**CHAT_HI, "cache_salt": 5}),
], ids=["completions-max_tokens", "chat-max_tokens", "chat-max_completion_tokens",
        "messages-max_tokens", "responses-max_output_tokens", "max_tokens-before-prompt",
        "completions-text", "chat-text", "messages-text", "token-ids", "batch-token-ids",
        "filling-the-window", "one-past-the-window", "batch-order", "empty-cache_salt",
        "cache_salt-with-at", "long-cache_salt", "cache_salt-not-text"])
async def test_lengths_past_the_window_are_refused_in_vllms_words(
        real_fleet: RealFleet, emulator: EmulatorProcess, path: str,
        body: dict[str, Any]) -> None:
    """The emulator clamped a max_tokens past the window (vLLM refuses it), counted a text
    too long in full (vLLM reads one token past the window: "at least"), left out vLLM's
    (parameter=…, value=…), and refused a prompt filling the window in other words."""
    real = await call(real_fleet.urls[0], path, body)
    emulated = await call(emulator.url, path, body)
    assert real[0] == 400 and emulated == real


async def test_top_k_minus_one_is_taken_as_vllm_takes_it(
        real_fleet: RealFleet, emulator: EmulatorProcess) -> None:
    real = await call(real_fleet.urls[0], "/v1/chat/completions", {**CHAT_HI, "top_k": -1})
    emulated = await call(emulator.url, "/v1/chat/completions", {**CHAT_HI, "top_k": -1})
    assert emulated[0] == real[0]


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {**CHAT_HI, "logprobs": True, "top_logprobs": 2}),
    ("/v1/chat/completions", {**CHAT_HI, "logprobs": True}),
    ("/v1/completions", {"model": MODEL, "prompt": "hi there", "max_tokens": 2, "logprobs": 2}),
], ids=["chat-top2", "chat-top0", "completions-2"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_logprobs_are_answered_in_vllms_shape(
        real_fleet: RealFleet, emulator: EmulatorProcess, path: str, body: dict[str, Any],
        stream: bool) -> None:
    """The emulator answered null for every logprobs asked."""
    body = {**body, "temperature": 0, "ignore_eos": True, "stream": stream}
    shapes = []
    for url in (real_fleet.urls[0], emulator.url):
        status, answer = await call(url, path, body)
        assert status == 200
        chunks = answer if stream else [answer]
        entries = [choice["logprobs"] for chunk in chunks if isinstance(chunk, dict)
                   for choice in chunk["choices"] if choice.get("logprobs")]
        assert entries, url
        first = entries[0]      # (a completion's alternatives are keyed by their text)
        shapes.append((paths(first["content"]) if "content" in first else set(first),
                       [len(top) for entry in entries for top in entry.get("top_logprobs", [])]
                       or [len(e["top_logprobs"]) for entry in entries
                           for e in entry.get("content", [])]))
    assert shapes[1] == shapes[0]


def test_core_metric_families(real_fleet: RealFleet, emulator: EmulatorProcess) -> None:
    with urllib.request.urlopen(emulator.url + "/health", timeout=10):
        pass
    real, emu = families(real_fleet.urls[0]), families(emulator.url)
    assert set(CORE_FAMILIES) <= set(real), "the core list names what real vLLM exposes"
    assert {f: real[f] for f in CORE_FAMILIES if emu.get(f) != real[f]} == {}
    for label in ("block_size", "num_gpu_blocks", "enable_prefix_caching",
                  "prefix_caching_hash_algo"):
        assert label in cache_config(real_fleet.urls[0])
        assert label in cache_config(emulator.url)


async def _abandoned_stream(url: str) -> None:
    """A completion stream read for three events, then left: the client disconnects."""
    body = {"model": MODEL, "prompt": "go on", "max_tokens": 1000, "ignore_eos": True,
            "stream": True}
    async with aiohttp.ClientSession() as session, session.post(url + "/v1/completions",
                                                                json=body) as resp:
        events = 0
        async for raw in resp.content:
            events += raw.startswith(b"data: ")
            if events == 3:
                break


def _settled(url: str, name: str, least: float, before: dict[str, float]) -> dict[str, float]:
    """The engine's samples once ``name`` moved at least ``least`` past ``before`` and the
    engine runs nothing (vLLM's metrics follow its steps)."""
    deadline = time.monotonic() + 30
    while True:
        now = scrape(url)
        if (now.get(name, 0.0) - before.get(name, 0.0) >= least
                and now.get("vllm:num_requests_running", 0.0) == 0) or (
                time.monotonic() > deadline):
            return now
        time.sleep(0.1)


async def test_iteration_tokens_and_aborts_are_counted_as_vllm_counts_them(
        real_fleet: RealFleet, emulator: EmulatorProcess) -> None:
    """The emulator observed ``iteration_tokens_total`` at every step, a prompt's chunks on
    their own (vLLM: once a step with outputs, its completed prompts' computed tokens and its
    generated ones), and counted a client's disconnect in ``request_success_total`` (vLLM
    counts finished requests only)."""
    prompt = [random.randrange(5, 90) for _ in range(100)]        # never cached before
    counted = []
    for url in (real_fleet.urls[0], emulator.url):
        before = scrape(url)
        status, _ = await call(url, "/v1/completions", {
            "model": MODEL, "prompt": prompt, "max_tokens": 5, "ignore_eos": True})
        assert status == 200
        after = _settled(url, "vllm:iteration_tokens_total_count", 5, before)
        await _abandoned_stream(url)
        await asyncio.sleep(0.5)
        ended = _settled(url, "vllm:iteration_tokens_total_count", 0, after)
        counted.append([after[name] - before[name] for name in (
            "vllm:iteration_tokens_total_count", "vllm:iteration_tokens_total_sum",
            "vllm:request_success_total")] + [ended["vllm:request_success_total"]
                                              - after["vllm:request_success_total"]])
    assert counted[0] == [5, 105, 1, 0]       # 100 + 1, then 1 a step; the abort: none
    assert counted[1] == counted[0]


def _stored_events(endpoint: str, url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The BlockStored maps an engine publishes on ``endpoint`` for one completion."""
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    try:
        sub.connect(endpoint)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        time.sleep(0.5)                                      # let the subscription propagate
        request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as resp:
            assert resp.status == 200
        stored: list[dict[str, Any]] = []
        while sub.poll(3000):
            _, events, _ = msgpack.unpackb(sub.recv_multipart()[2], strict_map_key=False)
            stored += [e for e in events if e["type"] == "BlockStored"]
            if stored:
                return stored
        return stored
    finally:
        sub.close(0)
        ctx.term()


def test_stored_blocks_name_their_extra_keys_as_vllm_does(real_fleet: RealFleet) -> None:
    """vLLM's BlockStored maps carry one ``extra_keys`` entry per block (the cache salt on
    the first), in its field order; the emulator sent none."""
    prompt = [random.randrange(5, 90) for _ in range(300)]      # 2 blocks of 128, 18 of 16
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 1, "cache_salt": "abc"}
    real = _stored_events(str(real_fleet.fleet.workers[0].info.kv_events_endpoint),
                          real_fleet.urls[0], body)
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    with EmulatorProcess(gpu="l40s", model="llama-3-8b", served_model_names=[MODEL],
                         time_scale=0.01, emulate={"kv_events": endpoint,
                                                   "max_model_len": 2048}) as process:
        emulated = _stored_events(endpoint, process.url, body)
    assert real and emulated
    assert [list(e) for e in emulated] == [list(e) for e in real][:1] * len(emulated)
    for events in (real, emulated):
        keys = [k for e in events for k in e["extra_keys"]]
        assert keys == [["abc"]] + [None] * (len(keys) - 1)


@pytest.mark.parametrize(("path", "body", "prefix"), [
    ("/v1/chat/completions", {**CHAT_HI, "request_id": "mine-1"}, "chatcmpl"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2,
                         "request_id": "mine-2"}, "cmpl"),
])
async def test_a_body_request_id_names_the_answer(
        real_fleet: RealFleet, emulator: EmulatorProcess, path: str, body: dict[str, Any],
        prefix: str) -> None:
    """vLLM names a chat or completion after its body's request_id when no X-Request-Id
    came; the emulator drew one of its own."""
    for url in (real_fleet.urls[0], emulator.url):
        status, answer = await call(url, path, body)
        assert (status, answer["id"]) == (200, f"{prefix}-{body['request_id']}"), url


@pytest.mark.parametrize("fields", [
    {"max_tokens": "2"}, {"max_tokens": True}, {"max_completion_tokens": " 2 "},
    {"n": "2", "max_tokens": 2}, {"stream": "yes", "max_tokens": 2},
    {"max_tokens": 2, "stream": "on", "stream_options": {"include_usage": "1"}},
    {"max_tokens": 2, "min_p": "0.1", "temperature": " 0.5 ", "repetition_penalty": "1e0"},
    {"max_tokens": 2, "stream": "false", "stream_options": {"include_usage": True}},
], ids=["max_tokens-text", "max_tokens-true", "max_completion_tokens-spaced", "n-text",
        "stream-yes", "include_usage-text", "numbers-as-text", "stream-false-text"])
async def test_values_vllm_takes_laxly_are_taken(
        real_fleet: RealFleet, emulator: EmulatorProcess, fields: dict[str, Any]) -> None:
    """vLLM's request models take "2" and true as integers and "yes" as true (pydantic's lax
    mode); the emulator refused them with a 400."""
    body = {"model": MODEL, "messages": MESSAGES, "ignore_eos": True, **fields}
    answers = [await call(url, "/v1/chat/completions", body)
               for url in (real_fleet.urls[0], emulator.url)]
    assert [status for status, _ in answers] == [200, 200]
    shapes = []
    for _, answer in answers:
        if isinstance(answer, list):           # a stream: its events
            chunks = [e for e in answer if isinstance(e, dict)]
            shapes.append(("stream", sum(len(c["choices"]) == 0 for c in chunks) > 0))
        else:
            shapes.append(("whole", len(answer["choices"]), answer["usage"]["completion_tokens"]))
    assert shapes[1] == shapes[0]


async def test_a_request_id_already_running_runs_too(real_fleet: RealFleet,
                                                     emulator: EmulatorProcess) -> None:
    """vLLM 0.32 adds random characters to every id in its engine: a second request under an
    X-Request-Id that is running is served, named after it; the emulator refused it (400)."""
    headers = {"X-Request-Id": "dup-1"}
    for url in (real_fleet.urls[0], emulator.url):
        async with aiohttp.ClientSession() as session, session.post(
                url + "/v1/completions", headers=headers, json={
                    "model": MODEL, "prompt": "go on", "max_tokens": 200, "ignore_eos": True,
                    "stream": True}) as first:
            assert first.status == 200
            await first.content.readline()                      # it is running
            async with session.post(url + "/v1/completions", headers=headers, json={
                    "model": MODEL, "prompt": "hi", "max_tokens": 2}) as second:
                answer = await second.json()
                assert (second.status, answer["id"]) == (200, "cmpl-dup-1"), url


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/responses"])
async def test_a_streams_headers_are_vllms(real_fleet: RealFleet, emulator: EmulatorProcess,
                                           path: str) -> None:
    """vLLM streams as ``text/event-stream; charset=utf-8`` with no Cache-Control; the
    emulator sent no charset and a Cache-Control of its own."""
    body: dict[str, Any] = ({"model": MODEL, "input": "hi", "max_output_tokens": 2,
                             "stream": True} if path == "/v1/responses"
                            else {**CHAT_HI, "stream": True})
    seen = []
    for url in (real_fleet.urls[0], emulator.url):
        async with aiohttp.ClientSession() as session, session.post(url + path,
                                                                    json=body) as resp:
            await resp.read()
            seen.append((resp.status, resp.headers.get("Content-Type"),
                         resp.headers.get("Cache-Control")))
    assert seen[0] == (200, "text/event-stream; charset=utf-8", None)
    assert seen[1] == seen[0]


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {**CHAT_HI, "logit_bias": {"999999": 1}}),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2,
                         "stop_token_ids": [-1]}),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2, "logprobs": -1}),
    ("/v1/chat/completions", {**CHAT_HI, "logprobs": True, "top_logprobs": -1}),
], ids=["logit_bias-out-of-vocab", "stop_token_ids-negative", "logprobs-all",
        "top_logprobs-all"])
async def test_token_ids_past_the_vocabulary_are_refused_as_vllm_refuses_them(
        real_fleet: RealFleet, emulator: EmulatorProcess, path: str,
        body: dict[str, Any]) -> None:
    """The emulator served them; its words differ from vLLM's in the vocabulary's size only
    (the emulator's tokenizer is not the tiny model's)."""
    answers = [await call(url, path, body) for url in (real_fleet.urls[0], emulator.url)]
    (real_status, real), (emu_status, emu) = answers
    assert real_status == emu_status == 400
    assert {k: v for k, v in real["error"].items() if k != "message"} == \
        {k: v for k, v in emu["error"].items() if k != "message"}
    assert real["error"]["message"].split("Vocabulary size")[0].split(" of ")[0] == \
        emu["error"]["message"].split("Vocabulary size")[0].split(" of ")[0]


async def _raw(url: str, data: bytes, content_type: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(
            url + "/v1/chat/completions", data=data,
            headers={"Content-Type": content_type}) as resp:
        return resp.status, await resp.json(content_type=None)


@pytest.mark.parametrize(("data", "content_type"), [
    (b'{"model": "tiny"}', "text/plain"),
    (b"", "application/json"),
    (b"null", "application/json"),
    (b"{", "application/json"),
    (b'{"model": "tiny"} x', "application/json"),
    (b"[]", "application/json"),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "\xff"}]}',
     "application/json"),
    (b'{"model": "tiny", "messages": ' + b"[" * 3000 + b"]" * 3000 + b"}", "application/json"),
    (b'\xef\xbb\xbf{"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", '
     b'"content": "hi"}], "temperature": NaN}', "application/json"),
    (b'{"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", '
     b'"content": "a\\ud800b"}]}', "application/json"),
    (b'{"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", '
     b'"content": [{"type": "text", "text": "a\\ud800b"}]}]}', "application/json"),
], ids=["not-json", "no-body", "null", "cut-short", "extra-data", "not-an-object",
        "not-utf-8", "nested-too-deep", "bom-and-nan", "lone-surrogate",
        "lone-surrogate-in-a-part"])
async def test_bodies_vllm_cannot_read_are_refused_in_its_words(
        real_fleet: RealFleet, emulator: EmulatorProcess, data: bytes,
        content_type: str) -> None:
    """The emulator worded them as orjson does (a 500 for a body nested past Python's
    limit), refused a UTF-8 BOM and NaN that vLLM's JSON reader takes; a lone surrogate,
    which vLLM's JSON reader takes and its tokenizer refuses, must be refused too (taken
    with the BOM and NaN, it was served)."""
    real = await _raw(real_fleet.urls[0], data, content_type)
    emulated = await _raw(emulator.url, data, content_type)
    assert real[0] == 400 and emulated == real
