"""Workers started with an API key (vLLM's ``--api-key``), reached through the router: the
fleet file names the variable holding the key (``api_key_env``); the router sends that key on
every hop to the worker (its ``/v1/models`` polls, the requests it forwards in place of the
client's ``Authorization``, its Responses lookups). Without it, the worker's 401 reaches the
client and the router says why in its log, once.

The fleet: two emulated workers asking for the key, in their own process."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import pytest
import yaml

from router.app import create_app
from router.cli import main
from router.keys import REGISTRY
from router.settings import Settings
from tests.router.gateway_support import MODEL, ROUTING_ROUND_ROBIN, RouterFactory
from workers.credentials import MissingApiKey
from workers.emulator.process import EmulatorFleet
from workers.fleet import FleetConfig, load_fleet
from workers.ports import free_port

pytestmark = pytest.mark.integration
VARIABLE = "KVROUTE_TEST_WORKER_KEY"
WORKER_KEY = "sk-worker-secret"
EMULATE = {"time_scale": 0.01, "responses_store": True,
           "output_len": {"dist": "fixed", "value": 64}}


@pytest.fixture(scope="module")
def keyed_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    path: Path = tmp_path_factory.mktemp("keyed") / "fleet.yaml"
    path.write_text(yaml.safe_dump({
        "models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192}},
        "workers": [{"id": f"w{i}", "gpu": "h100", "models": [MODEL], "api_key_env": VARIABLE,
                     "emulate": {**EMULATE, "port": free_port()}} for i in range(2)]}))
    with pytest.MonkeyPatch.context() as env:
        env.setenv(VARIABLE, WORKER_KEY)
        loaded = load_fleet(path)
        with EmulatorFleet(loaded, one_process=True):
            yield loaded


async def test_the_router_reaches_keyed_workers_with_their_key(
        keyed_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(keyed_fleet, ROUTING_ROUND_ROBIN)
    for worker in ("w0", "w1"):      # what its /v1/models poll read, with the key
        snapshot = router.app[REGISTRY].snapshot(worker)
        assert snapshot is not None
        assert (snapshot.served_models, snapshot.max_model_len) == ((MODEL,), 8192)
    # the worker itself refuses the client's key: the router's own went in its place
    async with aiohttp.ClientSession() as http, http.get(
            f"{keyed_fleet.workers[0].info.url}/v1/models",
            headers={"Authorization": "Bearer sk-client"}) as resp:
        assert resp.status == 401
    client = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="sk-client", max_retries=0)
    served = set()
    for _ in range(2):
        raw = await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
        assert raw.parse().choices[0].message.content
        served.add(raw.headers["x-kvroute-worker"])
    assert served == {"w0", "w1"}
    first = await client.responses.create(model=MODEL, input="Remember me.",
                                          max_output_tokens=2)
    follow = await client.responses.create(model=MODEL, input="And?", max_output_tokens=2,
                                           previous_response_id=first.id)
    assert follow.previous_response_id == first.id
    # a router with no record of it looks for it on the workers, with their key
    restarted = openai.AsyncOpenAI(
        base_url=f"{(await make_router(keyed_fleet, ROUTING_ROUND_ROBIN)).url}/v1",
        api_key="sk-client", max_retries=0)
    assert (await restarted.responses.retrieve(first.id)).id == first.id
    assert [m.id for m in (await client.models.list()).data] == [MODEL]
    await client.close()
    await restarted.close()


async def test_without_the_key_the_workers_401_reaches_the_client_and_the_log_says_why(
        keyed_fleet: FleetConfig, make_router: RouterFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    unkeyed = dataclasses.replace(keyed_fleet, workers=tuple(
        dataclasses.replace(w, info=dataclasses.replace(w.info, api_key_env=None))
        for w in keyed_fleet.workers))
    caplog.set_level(logging.WARNING, logger="workers.scraper")
    router = await make_router(unkeyed, ROUTING_ROUND_ROBIN)
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{router.url}/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 3}) as resp:
            assert resp.status == 401 and await resp.json() == {"error": "Unauthorized"}
        async with http.get(f"{router.url}/health") as resp:     # /metrics is open: up
            assert resp.status == 200
    for worker in ("w0", "w1"):      # healthy by /metrics; nothing read from /v1/models
        snapshot = router.app[REGISTRY].snapshot(worker)
        assert snapshot is not None and snapshot.healthy
        assert (snapshot.served_models, snapshot.max_model_len) == ((), 0)
    warnings = [r.getMessage() for r in caplog.records if "asks for an API key" in r.getMessage()]
    assert len(warnings) == 2            # once per worker, not once per poll
    warnings.sort()                      # the two workers are polled concurrently
    assert "w0: /v1/models answered HTTP 401" in warnings[0]
    assert "w1: /v1/models answered HTTP 401" in warnings[1]
    assert all("give its key with api_key_env in the fleet file" in w for w in warnings)


def test_an_unset_variable_stops_the_start_with_its_name(
        keyed_fleet: FleetConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(fleet_path=Path(keyed_fleet.source), routing_path=tmp_path / "r.yaml")
    with pytest.raises(MissingApiKey, match=f"w0, w1: api_key_env names {VARIABLE}, which "
                       "is not set in the environment"):
        create_app(settings, keyed_fleet, environ={})
    with pytest.raises(MissingApiKey, match=f"api_key_env names {VARIABLE}, which is set but "
                       "empty"):
        create_app(settings, keyed_fleet, environ={VARIABLE: ""})
    monkeypatch.delenv(VARIABLE)
    routing = tmp_path / "routing.yaml"
    routing.write_text(ROUTING_ROUND_ROBIN)
    assert main(["serve", "--fleet", keyed_fleet.source, "--routing", str(routing),
                 "--port", str(free_port())]) == 2
    assert f"api_key_env names {VARIABLE}, which is not set" in capsys.readouterr().err


async def test_a_shared_key_sent_as_x_api_key_reaches_a_worker_without_api_key_env(
        keyed_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """Router and workers share one key, with no api_key_env: the client's key goes on to
    the worker, and an Anthropic client's x-api-key as the bearer token vLLM asks for."""
    unkeyed = dataclasses.replace(keyed_fleet, workers=tuple(
        dataclasses.replace(w, info=dataclasses.replace(w.info, api_key_env=None))
        for w in keyed_fleet.workers))
    router = await make_router(unkeyed, ROUTING_ROUND_ROBIN, api_keys=(WORKER_KEY,))
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    async with aiohttp.ClientSession() as http:
        for headers in ({"x-api-key": WORKER_KEY},
                        {"Authorization": f"Bearer {WORKER_KEY}"}):
            for path in ("/v1/messages", "/v1/chat/completions", "/tokenize"):
                async with http.post(router.url + path, json=body, headers=headers) as resp:
                    assert resp.status == 200, (path, headers, await resp.text())
