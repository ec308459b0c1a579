"""``POST /tokenize`` and ``POST /detokenize`` through the router, to emulated workers in
their own process: the least busy worker of the model, the next on a connect error, clear
errors for a missing or unknown model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.router.gateway_support import MODEL, RouterFactory
from workers.emulator.process import EmulatorFleet
from workers.fleet import FleetConfig, load_fleet
from workers.ports import free_port

pytestmark = pytest.mark.integration
EMBEDDER = "Qwen/Qwen3-Embedding-0.6B"
# real time: a 200-token stream holds its worker for about a second
TIMED = {"time_scale": 1.0, "output_len": {"dist": "fixed", "value": 200}}


def write_fleet(path: Path, workers: list[dict[str, Any]]) -> FleetConfig:
    path.write_text(yaml.safe_dump({
        "models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192},
                   EMBEDDER: {"arch": "qwen3-embedding-0.6b"}},
        "workers": workers}))
    return load_fleet(path)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    loaded = write_fleet(tmp_path_factory.mktemp("utility") / "fleet.yaml", [
        {"id": f"gen-{i}", "gpu": "h100", "models": [MODEL],
         "emulate": {**TIMED, "port": free_port()}} for i in range(2)])
    with EmulatorFleet(loaded, one_process=True):
        yield loaded


async def post(url: str, body: dict[str, Any]) -> tuple[int, Any, str]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        return resp.status, await resp.json(), resp.headers.get("x-kvroute-worker", "")


async def test_tokenize_and_detokenize_round_trip_in_turn_over_the_workers(
        fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(fleet)
    workers = set()
    for _ in range(4):
        status, tokens, worker = await post(f"{router.url}/tokenize",
                                            {"model": MODEL, "prompt": "Hello, world"})
        assert status == 200, tokens
        workers.add(worker)
        status, text, worker = await post(f"{router.url}/detokenize",
                                          {"model": MODEL, "tokens": tokens["tokens"]})
        assert (status, text["prompt"]) == (200, "Hello, world")
        workers.add(worker)
    assert workers == {"gen-0", "gen-1"}          # idle workers are taken in turn
    status, chat, _ = await post(f"{router.url}/tokenize", {      # one model: it may be left out
        "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and chat["count"] > 1, chat
    assert router.metric("kvroute_requests_total", model=MODEL, worker="gen-0",
                         gpu="H100-80GB", profile="utility", status="200") >= 2


async def test_utility_answers_carry_the_reason_and_the_request_id(
        fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(fleet)
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{router.url}/tokenize", json={"model": MODEL, "prompt": "hi"},
                                headers={"x-request-id": "mine-1"}) as resp:
            assert resp.status == 200
            worker = resp.headers["x-kvroute-worker"]
            assert resp.headers["x-request-id"] == "mine-1"
            assert resp.headers["x-kvroute-reason"] == (
                f"{worker}: fewest requests in flight of 2 healthy worker(s) of {MODEL} "
                "(no policy for /tokenize)")
        async with session.post(f"{router.url}/detokenize",
                                json={"model": MODEL, "tokens": [1, 2]}) as resp:
            assert resp.status == 200
            assert resp.headers["x-request-id"]              # none given: a new one
            assert resp.headers["x-kvroute-reason"].endswith("(no policy for /detokenize)")


async def test_the_least_busy_worker_tokenizes(fleet: FleetConfig,
                                               make_router: RouterFactory) -> None:
    router = await make_router(fleet)
    async with aiohttp.ClientSession() as session:
        async def stream() -> str:
            async with session.post(f"{router.url}/v1/completions", json={
                    "model": MODEL, "prompt": "x", "max_tokens": 200, "stream": True}) as resp:
                await resp.read()
                return resp.headers["x-kvroute-worker"]

        busy = [asyncio.create_task(stream()) for _ in range(3)]
        for _ in range(250):            # the streams are in flight
            if router.metric("kvroute_admission_in_flight") == 3:
                break
            await asyncio.sleep(0.02)
        statuses, workers = [], []
        for _ in range(4):
            status, _, worker = await post(f"{router.url}/tokenize",
                                           {"model": MODEL, "prompt": "x"})
            statuses.append(status)
            workers.append(worker)
        streamed_to = await asyncio.gather(*busy)
    less_busy = min(("gen-0", "gen-1"), key=streamed_to.count)
    assert streamed_to.count(less_busy) < streamed_to.count(
        "gen-1" if less_busy == "gen-0" else "gen-0")        # 3 streams over 2: never even
    assert statuses == [200] * 4
    assert workers == [less_busy] * 4, (streamed_to, workers)


async def test_a_worker_that_refuses_connections_is_passed_over(
        fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    live = fleet.workers[0].info.url
    mixed = write_fleet(tmp_path / "mixed.yaml", [
        {"id": "down", "gpu": "h100", "models": [MODEL], "url": f"http://127.0.0.1:{free_port()}"},
        {"id": "up", "gpu": "h100", "models": [MODEL], "url": live}])
    router = await make_router(mixed, scrape_interval_s=60.0)
    for _ in range(2):       # the dead worker is first in turn once
        status, body, worker = await post(f"{router.url}/tokenize",
                                          {"model": MODEL, "prompt": "x"})
        assert (status, worker) == (200, "up"), body


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"model": "nope", "prompt": "x"}, 404, "The model `nope` does not exist"),
    ({"model": 7, "prompt": "x"}, 400, "You must provide a model parameter"),
    ({"prompt": "x"}, 400, "model: required, the fleet serves several models"),
    ({"model": "", "prompt": "x"}, 400, "model: required, the fleet serves several models"),
])
async def test_a_missing_or_unknown_model_is_a_clear_error(
        fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path,
        body: dict[str, Any], status: int, message: str) -> None:
    two_models = write_fleet(tmp_path / "two.yaml", [
        {"id": "gen", "gpu": "h100", "models": [MODEL], "url": fleet.workers[0].info.url},
        {"id": "embed", "gpu": "h100", "models": [EMBEDDER], "url": fleet.workers[1].info.url}])
    router = await make_router(two_models)
    answer_status, answer, _ = await post(f"{router.url}/tokenize", body)
    assert answer_status == status, answer
    assert message in answer["error"]["message"]


@pytest.mark.parametrize(("path", "body"), [
    ("/tokenize", {"model": MODEL, "prompt": "x"}),
    ("/v1/messages/count_tokens", {"model": MODEL,
                                   "messages": [{"role": "user", "content": "x"}]}),
])
async def test_no_healthy_worker_is_a_503_to_retry_soon(
        make_router: RouterFactory, tmp_path: Path, path: str, body: dict[str, Any]) -> None:
    """As a routed request's: count_tokens' 503 said nothing of when to ask again."""
    down = write_fleet(tmp_path / "down.yaml", [
        {"id": "down", "gpu": "h100", "models": [MODEL],
         "url": f"http://127.0.0.1:{free_port()}"}])
    router = await make_router(down)
    async with aiohttp.ClientSession() as session, session.post(
            f"{router.url}{path}", json=body) as resp:
        assert resp.status == 503
        assert resp.headers["Retry-After"] == "1"


async def test_an_alias_is_tokenized_as_its_target(fleet: FleetConfig,
                                                   make_router: RouterFactory) -> None:
    """A routing rule's alias, which ``/v1/models`` lists and chat accepts, was a 404 on the
    tokenizer paths: their bodies went on naming it, and no worker serves it."""
    routing = (Path(__file__).resolve().parents[2] / "config/routing.yaml").read_text() + (
        f"rules:\n  - {{when: {{model: gpt-4o-mini}}, then: {{model: {MODEL}}}}}\n")
    router = await make_router(fleet, routing)
    status, aliased, worker = await post(f"{router.url}/tokenize",
                                         {"model": "gpt-4o-mini", "prompt": "Hello, world"})
    assert status == 200, aliased
    assert worker in {"gen-0", "gen-1"}
    _, direct, _ = await post(f"{router.url}/tokenize", {"model": MODEL, "prompt": "Hello, world"})
    assert aliased["tokens"] == direct["tokens"]
    status, missing, _ = await post(f"{router.url}/tokenize", {"model": "gpt-5", "prompt": "x"})
    assert status == 404, missing
