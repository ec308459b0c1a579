"""A real vLLM engine started with an API key (``api_key_env`` in the fleet file, which
``kvroute launch-vllm``'s code turns into the engine's ``VLLM_API_KEY``): it refuses requests
without the key; through kvroute, which sends the key on every hop, clients holding other keys
(or none) are served, the router's ``/v1/models`` polls read it, and a stored response is
found again; the emulator refuses as the engine does. A third engine, for this module only."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import pytest

from router.app import start_router
from router.keys import REGISTRY
from router.settings import Settings
from tests.real_vllm.conftest import MODEL, fleet_data, launched_fleet
from tests.real_vllm.test_openai_client import ROUND_ROBIN_ROUTING
from workers.emulator.process import EmulatorProcess
from workers.fleet import FleetConfig

VARIABLE = "KVROUTE_TEST_ENGINE_KEY"
ENGINE_KEY = "sk-real-engine"


@pytest.fixture(scope="module")
def keyed_engine(vllm_python: str, tiny_model: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    data = fleet_data(tiny_model, vllm_python)
    data["workers"] = [{**data["workers"][0], "id": "cpu-keyed", "api_key_env": VARIABLE}]
    del data["workers"][0]["kv_events"]
    with pytest.MonkeyPatch.context() as env:
        env.setenv(VARIABLE, ENGINE_KEY)
        with launched_fleet(data, tmp_path_factory.mktemp("keyed-engine")) as fleet:
            yield fleet


async def get_status(url: str, headers: dict[str, str]) -> tuple[int, object]:
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_kvroute_serves_a_keyed_engine_with_its_key(
        keyed_engine: FleetConfig, tmp_path: Path) -> None:
    engine = keyed_engine.workers[0].info.url
    refused = await get_status(f"{engine}/v1/models", {"Authorization": "Bearer sk-client"})
    assert refused == (401, {"error": "Unauthorized"})
    assert (await get_status(f"{engine}/v1/models",
                             {"Authorization": f"Bearer {ENGINE_KEY}"}))[0] == 200
    with EmulatorProcess(served_model_names=[MODEL], time_scale=0.01,
                         extra_args=["--api-key", ENGINE_KEY]) as emulated:
        assert await get_status(f"{emulated.url}/v1/models",
                                {"Authorization": "Bearer sk-client"}) == refused
    routing = tmp_path / "routing.yaml"
    routing.write_text(ROUND_ROBIN_ROUTING)
    settings = Settings(fleet_path=Path(keyed_engine.source), routing_path=routing, port=0,
                        scrape_interval_s=0.1)
    runner, port = await start_router(settings, keyed_engine)
    try:
        snapshot = runner.app[REGISTRY].snapshot("cpu-keyed")
        assert snapshot is not None       # read from the engine's /v1/models, with the key
        assert (snapshot.served_models, snapshot.max_model_len) == ((MODEL,), 2048)
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1",
                                    api_key="sk-client", max_retries=0)
        reply = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
        assert reply.usage is not None and reply.usage.completion_tokens == 3
        kept = await client.responses.create(model=MODEL, input="Remember rivers.",
                                             max_output_tokens=3)
        assert (await client.responses.retrieve(kept.id)).id == kept.id
        await client.close()
    finally:
        await runner.cleanup()
    # the same engine behind a router without its key: the engine's 401 reaches the client
    unkeyed = dataclasses.replace(keyed_engine, workers=tuple(
        dataclasses.replace(w, info=dataclasses.replace(w.info, api_key_env=None))
        for w in keyed_engine.workers))
    runner, port = await start_router(settings, unkeyed)
    try:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1",
                                    api_key="sk-client", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
        await client.close()
    finally:
        await runner.cleanup()
