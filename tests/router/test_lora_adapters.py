"""LoRA adapters through the router, over emulated workers of which one has an adapter
loaded: the adapter's prompts are hashed with vLLM's LoRA key (no prefix shared with the
base model's same prompt), an adapter of a generative model asked for embeddings gets the
router's 400, as its base model does, and an adapter loaded, moved and unloaded at run time
is followed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from router.keys import MODEL_RETIREMENT, REGISTRY
from tests.router.gateway_support import MODEL, ROUTING_ROUND_ROBIN, RouterFactory
from workers.emulator.process import EmulatorFleet
from workers.fleet import FleetConfig, load_fleet
from workers.ports import free_port

pytestmark = pytest.mark.integration
ADAPTER = "sql-lora"
EMULATE = {"time_scale": 0.01, "output_len": {"dist": "fixed", "value": 4},
           "runtime_lora_updating": True}


@pytest.fixture(scope="module")
def adapter_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    path: Path = tmp_path_factory.mktemp("lora") / "fleet.yaml"
    path.write_text(yaml.safe_dump({
        "models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192}},
        "workers": [
            {"id": "with-adapter", "gpu": "h100", "models": [MODEL],
             "emulate": {**EMULATE, "port": free_port(),
                         "lora_adapters": {ADAPTER: "/adapters/sql-lora"}}},
            {"id": "base-only", "gpu": "h100", "models": [MODEL],
             "emulate": {**EMULATE, "port": free_port()}}]}))
    fleet = load_fleet(path)
    with EmulatorFleet(fleet, one_process=True):
        yield fleet


async def _adapter_listed(http: aiohttp.ClientSession, url: str) -> None:
    """Wait (at most 10 s) until the router lists the adapter (its worker's /v1/models)."""
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        async with http.get(url + "/v1/models") as resp:
            if ADAPTER in {card["id"] for card in (await resp.json())["data"]}:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{ADAPTER} never listed")


async def _chat(http: aiohttp.ClientSession, url: str, model: str,
                text: str) -> dict[str, Any]:
    body = {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": text}]}
    async with http.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        request_id = resp.headers["x-request-id"]
        await resp.read()
    async with http.get(url + "/debug/decisions") as resp:
        decisions = (await resp.json())["data"]
    return next(d for d in decisions if d["request_id"] == request_id)


async def test_an_adapters_prompt_shares_no_cached_prefix_with_the_base_models(
        adapter_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(adapter_fleet, None)
    text = "Write the SQL for the monthly revenue report by region. " * 40
    async with aiohttp.ClientSession() as http:
        await _adapter_listed(http, router.url)
        # the base model's prompt sent until it has landed on the worker with the adapter
        # (at most 20 times), then the adapter's same prompt goes there (only it has it)
        for _ in range(20):
            base = await _chat(http, router.url, MODEL, text)
            if base["worker"] == "with-adapter":
                break
        assert base["worker"] == "with-adapter"
        first = await _chat(http, router.url, ADAPTER, text)
        again = await _chat(http, router.url, ADAPTER, text)
    assert first["worker"] == again["worker"] == "with-adapter"
    # vLLM hashes the adapter into every block: the base model's blocks are no hit for it
    assert first["attributes"]["prefix_match_tokens"] == 0
    assert again["attributes"]["prefix_match_tokens"] >= 400     # its own blocks are


async def test_an_adapter_of_a_generative_model_asked_for_embeddings_gets_the_routers_400(
        adapter_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(adapter_fleet, None)
    async with aiohttp.ClientSession() as http:
        await _adapter_listed(http, router.url)
        for model in (MODEL, ADAPTER):
            async with http.post(router.url + "/v1/embeddings",
                                 json={"model": model, "input": "hello"}) as resp:
                assert resp.status == 400, (model, await resp.text())
                message = (await resp.json())["error"]["message"]
                assert "runs it for generation" in message and "/v1/chat/completions" in message


async def _served_by(http: aiohttp.ClientSession, url: str, model: str,
                     expected: str | None) -> None:
    """Wait (at most 10 s) until a chat for ``model`` goes to ``expected`` (None: until the
    router answers its own 404 for it and no longer lists it)."""
    body = {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    deadline = time.monotonic() + 10.0
    while True:
        async with http.post(url + "/v1/chat/completions", json=body) as resp:
            text = await resp.text()
            worker = resp.headers.get("x-kvroute-worker")
            if expected is not None and resp.status == 200 and worker == expected:
                return
            if expected is None and resp.status == 404 and worker == "none":   # the router's
                assert "does not exist" in text
                async with http.get(url + "/v1/models") as listed:
                    assert model not in {c["id"] for c in (await listed.json())["data"]}
                return
        assert time.monotonic() < deadline, (model, expected, resp.status, worker, text)
        await asyncio.sleep(0.05)


async def test_an_adapter_moved_and_unloaded_at_run_time_is_followed(
        adapter_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """vLLM writes a lora_requests_info series at each change and keeps the old ones: every
    adapter that had ever run stayed loaded for the router, whose requests kept going to a
    worker that had unloaded it (the worker's 404, for good)."""
    router = await make_router(adapter_fleet, None, models_interval_s=0.1)
    urls = {spec.info.id: spec.info.url for spec in adapter_fleet.workers}
    async with aiohttp.ClientSession() as http:
        async def lora(worker: str, action: str) -> None:
            body = {"lora_name": "fin", "lora_path": "/adapters/fin"}
            async with http.post(f"{urls[worker]}/v1/{action}_lora_adapter",
                                 json=body) as resp:
                assert resp.status == 200, await resp.text()

        await lora("with-adapter", "load")
        await _served_by(http, router.url, "fin", "with-adapter")
        await lora("with-adapter", "unload")        # moved to the other worker
        await lora("base-only", "load")
        await _served_by(http, router.url, "fin", "base-only")
        await lora("base-only", "unload")           # and gone from the fleet
        await _served_by(http, router.url, "fin", None)
        await _chat(http, router.url, MODEL, "the base model's")
    # its series go once no worker has served it for the grace (a minute; here none): 50
    # adapters loaded, used and unloaded left some 43 series each, for good
    assert router.metric("kvroute_requests_total", model="fin") > 0
    served_base = router.metric("kvroute_requests_total", model=MODEL)
    retirement = router.app[MODEL_RETIREMENT]
    retirement.grace_s = 0.0
    assert retirement.sweep() == ["fin"]
    assert router.metric("kvroute_requests_total", model="fin") == 0
    assert router.metric("kvroute_client_ttft_seconds_count", model="fin") == 0
    assert router.metric("kvroute_requests_total", model=MODEL) == served_base > 0


async def test_a_worker_that_unloaded_the_adapter_is_passed_over_at_once(
        adapter_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """Between an unload and the router's next read of the worker's /v1/models, the requests
    for the adapter sent there got the worker's 404. Now that 404 sends the request on to
    another worker that has it, and the worker is taken as without it at once."""
    urls = {spec.info.id: spec.info.url for spec in adapter_fleet.workers}
    body = {"lora_name": "fin", "lora_path": "/adapters/fin"}
    chat = {"model": "fin", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as http:
        for worker in urls:
            async with http.post(urls[worker] + "/v1/load_lora_adapter", json=body) as resp:
                assert resp.status == 200, await resp.text()
        # models read once, at start: the router would not see an unload for a minute
        router = await make_router(adapter_fleet, ROUTING_ROUND_ROBIN, models_interval_s=60.0)
        deadline = time.monotonic() + 10.0
        while not all("fin" in v.lora_adapters for v in router.app[REGISTRY].views(0.0)):
            assert time.monotonic() < deadline, "the adapter was never seen loaded"
            await asyncio.sleep(0.05)
        async with http.post(urls["with-adapter"] + "/v1/unload_lora_adapter",
                             json={"lora_name": "fin"}) as resp:
            assert resp.status == 200
        served = []
        for _ in range(4):      # round robin: the first or the second goes there first
            async with http.post(router.url + "/v1/chat/completions", json=chat) as resp:
                assert resp.status == 200, await resp.text()
                served.append(resp.headers["x-kvroute-worker"])
        assert served == ["base-only"] * 4
        assert router.metric("kvroute_retries_total", worker="with-adapter",
                             reason="model_not_found") == 1
        assert router.metric("kvroute_worker_ejections_total", worker="with-adapter") == 0
        async with http.post(urls["base-only"] + "/v1/unload_lora_adapter",
                             json={"lora_name": "fin"}) as resp:
            assert resp.status == 200
        async with http.post(router.url + "/v1/chat/completions", json=chat) as resp:
            assert resp.status == 404                  # no worker has it: vLLM's 404
            assert (await resp.json())["error"]["message"].startswith(
                "The model `fin` does not exist.")


async def test_a_rules_adapter_no_worker_has_is_the_workers_404_once(
        adapter_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A rule's adapter that no worker has: the model filter falls back to the base model's
    workers, and the worker's 404 is the answer. It is not taken for an adapter unloaded
    since the last scrape (every worker was tried, then a 404 for an adapter the client
    never named)."""
    rule = ("rules:\n  - name: ghostly\n    when: {header: {x-tier: ghost}}\n"
            "    then: {adapter: ghost}\n")
    router = await make_router(adapter_fleet, ROUTING_ROUND_ROBIN + rule)
    chat = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as http, http.post(
            router.url + "/v1/chat/completions", json=chat,
            headers={"x-tier": "ghost"}) as resp:
        assert resp.status == 404
    assert router.metric("kvroute_retries_total", reason="model_not_found") == 0
    assert router.metric("kvroute_requests_total", status="404") == 1


@pytest.fixture(scope="module")
def two_adapter_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    """Two workers, each with two adapters loaded and vLLM's default --max-loras 1: one
    adapter's requests at a time run on each."""
    path: Path = tmp_path_factory.mktemp("lora2") / "fleet.yaml"
    adapters = {"sql-lora": "/adapters/sql", "chat-lora": "/adapters/chat"}
    emulate = {"time_scale": 1.0, "output_len": {"dist": "fixed", "value": 40},
               "lora_adapters": adapters}
    path.write_text(yaml.safe_dump({
        "models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192}},
        "workers": [{"id": f"w{i}", "gpu": "h100", "models": [MODEL],
                     "emulate": {**emulate, "port": free_port()}} for i in range(2)]}))
    fleet = load_fleet(path)
    with EmulatorFleet(fleet, one_process=True):
        yield fleet


async def test_lora_affinity_keeps_each_adapter_on_a_worker_of_its_own(
        two_adapter_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A burst for two adapters within one scrape interval: each worker looked free, and
    requests of both adapters went to each, where vLLM runs one adapter at a time (the
    other's requests wait, deferred). With ``lora-affinity`` each adapter has a worker."""
    routing = ("profiles:\n  default:\n    filters: [{type: model}, {type: healthy}]\n"
               "    scorers: [{type: lora-affinity, weight: 1.0}]\n"
               "    picker: {type: max-score}\ndefault_profile: default\n")
    router = await make_router(two_adapter_fleet, routing)
    async with aiohttp.ClientSession() as http:
        await _adapter_listed(http, router.url)

        async def send(adapter: str) -> tuple[str, str]:
            body = {"model": adapter, "prompt": "Summarise the ticket.", "max_tokens": 40,
                    "ignore_eos": True}
            async with http.post(router.url + "/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                return adapter, resp.headers["x-kvroute-worker"]

        answers = await asyncio.gather(*(send(("sql-lora", "chat-lora")[i % 2])
                                         for i in range(12)))
    workers: dict[str, set[str]] = {}
    for adapter, worker in answers:
        workers.setdefault(adapter, set()).add(worker)
    assert len(workers["sql-lora"]) == 1 and len(workers["chat-lora"]) == 1, workers
    assert workers["sql-lora"] != workers["chat-lora"]
