"""OpenAI's Responses API through the router, with the official ``openai`` client: a response
is continued (``previous_response_id``), read back and cancelled at the worker that made it,
also through a second replica sharing Redis; the rest is routed by the policy as usual.

The fleet: three emulated workers keeping responses (vLLM's VLLM_ENABLE_RESPONSES_API_STORE),
in their own process. The routing is round-robin, which on its own would send each follow-up
to another worker, where the response does not exist (404)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import yaml

from router.keys import REGISTRY
from router.loop_lag import LoopStalls
from tests.router.gateway_support import MODEL, ROUTING_ROUND_ROBIN, RouterFactory
from workers.emulator.process import EmulatorFleet
from workers.fleet import FleetConfig, load_fleet
from workers.ports import free_port

pytestmark = pytest.mark.integration
KEEPING = {"time_scale": 0.01, "responses_store": True,
           "output_len": {"dist": "fixed", "value": 64}}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    path: Path = tmp_path_factory.mktemp("responses") / "fleet.yaml"
    path.write_text(yaml.safe_dump({
        "models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192}},
        "workers": [{"id": f"w{i}", "gpu": "h100", "models": [MODEL],
                     "emulate": {**KEEPING, "port": free_port()}} for i in range(3)]}))
    loaded = load_fleet(path)
    with EmulatorFleet(loaded, one_process=True):
        yield loaded


def client_of(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


async def test_a_conversation_stays_on_the_worker_holding_it(
        fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(fleet, ROUTING_ROUND_ROBIN)
    client = client_of(router.url)
    raw = await client.responses.with_raw_response.create(
        model=MODEL, input="Tell me about the sea.", max_output_tokens=8)
    first = raw.parse()
    owner = raw.headers["x-kvroute-worker"]
    assert first.id.startswith("resp_") and first.usage is not None
    previous, prompt_tokens = first, first.usage.input_tokens
    for turn in range(4):
        raw = await client.responses.with_raw_response.create(
            model=MODEL, input=f"And then? ({turn})", max_output_tokens=8,
            previous_response_id=previous.id)
        answer = raw.parse()
        assert raw.headers["x-kvroute-worker"] == owner
        assert answer.previous_response_id == previous.id
        assert answer.usage is not None and answer.usage.input_tokens > prompt_tokens
        previous, prompt_tokens = answer, answer.usage.input_tokens
    # new conversations are still spread by the policy (round-robin here)
    others = set()
    for _ in range(3):
        raw = await client.responses.with_raw_response.create(model=MODEL, input="hi",
                                                              max_output_tokens=2)
        others.add(raw.headers["x-kvroute-worker"])
    assert others == {"w0", "w1", "w2"}
    read = await client.responses.retrieve(previous.id)
    assert read.id == previous.id and read.output_text == previous.output_text
    with pytest.raises(openai.BadRequestError, match="Cannot cancel a synchronous response"):
        await client.responses.cancel(previous.id)
    with pytest.raises(openai.NotFoundError, match="Response with id 'resp_nope' not found"):
        await client.responses.retrieve("resp_nope")
    await client.close()


async def test_a_stream_is_relayed_whole_and_counted(fleet: FleetConfig,
                                                     make_router: RouterFactory,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # a loop stalled 0.5 s (a loaded machine) drops a request's times, by design
    # (test_loop_lag.py): this test asserts them
    monkeypatch.setattr(LoopStalls, "since", lambda self, start: False)
    router = await make_router(fleet, ROUTING_ROUND_ROBIN)
    client = client_of(router.url)
    kinds = []
    async with await client.responses.create(model=MODEL, input="Stream, please.",
                                             max_output_tokens=6, stream=True) as events:
        async for event in events:
            kinds.append(event.type)
            if event.type == "response.completed":
                done = event.response
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") >= 1
    assert done.usage is not None and done.usage.output_tokens == 6
    follow = await client.responses.create(model=MODEL, input="More.", max_output_tokens=2,
                                           previous_response_id=done.id)
    assert follow.previous_response_id == done.id
    await client.close()
    workers = {"w0", "w1", "w2"}
    output = sum(router.metric("kvroute_completion_tokens_total", worker=w, gpu="H100-80GB")
                 for w in workers)
    assert output >= 6 + 2
    first_tokens = sum(router.metric("kvroute_ttft_seconds_count", worker=w, gpu="H100-80GB")
                       for w in workers)
    assert first_tokens >= 1           # the stream's first delta, not its first event


async def test_the_client_request_id_is_the_response_id(fleet: FleetConfig,
                                                        make_router: RouterFactory) -> None:
    router = await make_router(fleet, ROUTING_ROUND_ROBIN)
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{router.url}/v1/responses", json={
                "model": MODEL, "input": "x", "max_output_tokens": 2,
                "request_id": "resp_client-chosen"}) as resp:
            body = await resp.json()
            owner = resp.headers["x-kvroute-worker"]
        assert (resp.status, body["id"]) == (200, "resp_client-chosen")
        async with session.get(f"{router.url}/v1/responses/resp_client-chosen") as resp:
            assert resp.status == 200 and resp.headers["x-kvroute-worker"] == owner
        # HEAD was forwarded: the worker's Content-Length with no body held it 300 s
        async with session.head(f"{router.url}/v1/responses/resp_client-chosen",
                                timeout=aiohttp.ClientTimeout(total=10)) as resp:
            assert resp.status == 405 and resp.headers["Allow"] == "GET"
        async with session.post(f"{router.url}/v1/responses", json={
                "model": MODEL, "input": "x", "previous_response_id": 7}) as resp:
            error = await resp.json()
        assert resp.status == 400 and error["error"]["param"] == "previous_response_id"
        # ".." was accepted, and /v1/responses/%2e%2e went to the worker's /v1/
        for dots in (".", ".."):
            async with session.post(f"{router.url}/v1/responses", json={
                    "model": MODEL, "input": "x", "request_id": dots}) as resp:
                error = await resp.json()
            assert resp.status == 400 and error["error"]["param"] == "request_id"
        async with session.get(f"{router.url}/v1/responses/%2e%2e") as resp:
            assert resp.status == 404
        # refusals of the utility paths name their request too, and a bad body is counted
        not_found = {"model": "(unknown)", "worker": "", "gpu": "", "profile": "utility",
                     "status": "404", "api": "responses"}
        missing_before = router.metric("kvroute_requests_total", **not_found)
        async with session.get(f"{router.url}/v1/responses/resp_nope",
                               headers={"x-request-id": "look-1"}) as resp:
            assert resp.status == 404 and resp.headers["x-request-id"] == "look-1"
        # counted, as every other answer is (it was not)
        assert router.metric("kvroute_requests_total", **not_found) == missing_before + 1
        before = router.metric("kvroute_requests_total", model="(unknown)", worker="",
                               gpu="", profile="none", status="400")
        async with session.post(f"{router.url}/tokenize", data=b"{bad",
                                headers={"x-request-id": "tok-1"}) as resp:
            assert resp.status == 400 and resp.headers["x-request-id"] == "tok-1"
        assert router.metric("kvroute_requests_total", model="(unknown)", worker="", gpu="",
                             profile="none", status="400") == before + 1


async def test_a_second_replica_sharing_redis_finds_the_owner(
        redis_url: str, fleet: FleetConfig, make_router: RouterFactory,
        tmp_path: Path) -> None:
    # (redis_url first: its server outlives the routers, which are stopped before it)
    one = await make_router(fleet, ROUTING_ROUND_ROBIN, redis_url=redis_url,
                            replica_id="one")
    two = await make_router(fleet, ROUTING_ROUND_ROBIN, redis_url=redis_url,
                            replica_id="two")
    first_client, second_client = client_of(one.url), client_of(two.url)
    raw = await first_client.responses.with_raw_response.create(
        model=MODEL, input="Remember this.", max_output_tokens=2)
    owner, first = raw.headers["x-kvroute-worker"], raw.parse()
    for _ in range(3):       # round-robin alone would leave the owner at least twice
        raw = await second_client.responses.with_raw_response.create(
            model=MODEL, input="What was it?", max_output_tokens=2,
            previous_response_id=first.id)
        assert raw.headers["x-kvroute-worker"] == owner
    assert (await second_client.responses.retrieve(first.id)).id == first.id
    await first_client.close()
    await second_client.close()
    # a replica that cannot reach the owner says so rather than asking another worker
    path = tmp_path / "owner-down.yaml"
    path.write_text(yaml.safe_dump({
        "models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192}},
        "workers": [{"id": w.info.id, "gpu": "h100", "models": [MODEL],
                     "url": (f"http://127.0.0.1:{free_port()}" if w.info.id == owner
                             else w.info.url)} for w in fleet.workers]}))
    three = await make_router(load_fleet(path), ROUTING_ROUND_ROBIN, redis_url=redis_url,
                              replica_id="three")
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{three.url}/v1/responses", json={
                "model": MODEL, "input": "x", "previous_response_id": first.id}) as resp:
            error = await resp.json()
        assert resp.status == 503, error
        assert f"The worker `{owner}` holding response `{first.id}`" in error["error"]["message"]
        async with session.get(f"{three.url}/v1/responses/{first.id}") as resp:
            assert resp.status == 503
    # both counted where the 5xx alerts look
    assert three.metric("kvroute_requests_total", model=MODEL, worker=owner, gpu="H100-80GB",
                        profile="pinned", status="503") == 1
    assert three.metric("kvroute_requests_total", model=MODEL, worker=owner, gpu="H100-80GB",
                        profile="utility", status="503") == 1


async def test_a_router_with_no_record_finds_the_worker_holding_the_response(
        fleet: FleetConfig, make_router: RouterFactory) -> None:
    one = await make_router(fleet, ROUTING_ROUND_ROBIN)
    client = client_of(one.url)
    raw = await client.responses.with_raw_response.create(model=MODEL, input="Remember me.",
                                                          max_output_tokens=2)
    owner, first = raw.headers["x-kvroute-worker"], raw.parse()
    second = await client.responses.create(model=MODEL, input="And me.", max_output_tokens=2)
    await client.close()
    # a router that never saw them, as after a restart without Redis
    restarted = client_of((await make_router(fleet, ROUTING_ROUND_ROBIN)).url)
    for _ in range(3):        # round-robin alone would leave the owner at least twice
        raw = await restarted.responses.with_raw_response.create(
            model=MODEL, input="Still there?", max_output_tokens=2,
            previous_response_id=first.id)
        assert raw.headers["x-kvroute-worker"] == owner
    assert (await restarted.responses.retrieve(second.id)).id == second.id
    with pytest.raises(openai.NotFoundError, match="Response with id 'resp_gone' not found"):
        await restarted.responses.create(model=MODEL, input="x", max_output_tokens=2,
                                         previous_response_id="resp_gone")
    await restarted.close()


async def test_a_response_the_worker_does_not_keep_leaves_no_record_and_a_kept_one_expires(
        redis_url: str, fleet: FleetConfig, make_router: RouterFactory) -> None:
    import redis.asyncio as aioredis

    from router.state.redis_store import RedisKeys
    response_prefix = RedisKeys().response

    router = await make_router(fleet, ROUTING_ROUND_ROBIN, redis_url=redis_url,
                               response_ttl_s=600)
    client = client_of(router.url)
    kept = await client.responses.create(model=MODEL, input="Keep it.", max_output_tokens=2)
    passing = await client.responses.create(model=MODEL, input="Do not.", max_output_tokens=2,
                                            store=False)
    await client.close()
    store = aioredis.from_url(redis_url)
    try:
        # the owner of a kept response is shared; one nobody can continue is not recorded
        assert await store.get(response_prefix + kept.id) is not None
        assert 590 <= await store.ttl(response_prefix + kept.id) <= 600    # --response-ttl
        assert await store.keys(response_prefix + "*") == [(response_prefix + kept.id).encode()]
    finally:
        await store.aclose()
    assert passing.id.startswith("resp_") and passing.id != kept.id    # answered as usual


ROUTING_BY_TURN = ROUTING_ROUND_ROBIN + """\
rules:
  - name: beta-turns
    when: {header: {x-turn: beta}}
    then: {model: beta}
"""


def _keeping_fleet(tmp_path_factory: pytest.TempPathFactory, models: tuple[str, ...],
                   workers: list[dict[str, Any]]) -> Iterator[FleetConfig]:
    """H100 workers keeping responses, emulated in one process: each entry's ``id`` and
    ``models``, and its ``lora_adapters`` and ``runtime_lora_updating`` for the emulator."""
    path: Path = tmp_path_factory.mktemp("responses-fleet") / "fleet.yaml"
    path.write_text(yaml.safe_dump({
        "models": {name: {"arch": "llama-3-8b", "max_model_len": 8192} for name in models},
        "workers": [{"id": w["id"], "gpu": "h100", "models": w["models"],
                     "emulate": {**KEEPING, "port": free_port(),
                                 **{key: w[key] for key in ("lora_adapters",
                                                            "runtime_lora_updating")
                                    if key in w}}}
                    for w in workers]}))
    loaded = load_fleet(path)
    with EmulatorFleet(loaded, one_process=True):
        yield loaded


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    """Two workers keeping responses, each serving its own model."""
    yield from _keeping_fleet(tmp_path_factory, ("alpha", "beta"), [
        {"id": f"{name}-0", "models": [name]} for name in ("alpha", "beta")])


async def test_a_rule_that_would_move_a_conversation_is_set_aside_for_its_holder(
        two_models: FleetConfig, make_router: RouterFactory) -> None:
    """A rule (a semantic class, here a header) sends a later turn to a model its holder does
    not serve: the turn still goes to the holder, with the model it serves."""
    router = await make_router(two_models, ROUTING_BY_TURN)
    client = client_of(router.url)
    raw = await client.responses.with_raw_response.create(
        model="alpha", input="First turn.", max_output_tokens=4)
    first = raw.parse()
    assert raw.headers["x-kvroute-worker"] == "alpha-0" and first.model == "alpha"
    # on its own the rule sends this turn to beta-0, which does not hold the response
    raw = await client.responses.with_raw_response.create(
        model="alpha", input="Second turn.", max_output_tokens=4,
        previous_response_id=first.id, extra_headers={"x-turn": "beta"})
    second = raw.parse()
    assert raw.headers["x-kvroute-worker"] == "alpha-0"
    assert second.model == "alpha" and second.previous_response_id == first.id
    reason = raw.headers["x-kvroute-reason"]
    assert reason.startswith("continues a response only alpha-0 holds, which rule "
                             "beta-turns left out (target beta): ")
    # a model the client names that the holder does not serve: no other model answers for
    # it (it was answered by the holder's, its name alone in the body saying so)
    with pytest.raises(openai.NotFoundError) as info:
        await client.responses.create(model="beta", input="Third turn.",
                                      max_output_tokens=4, previous_response_id=second.id)
    assert info.value.response.headers["x-kvroute-worker"] == "none"
    assert info.value.body == {
        "message": "The model `beta` is not served by alpha-0, the worker holding the response "
                   "this request continues (previous_response_id), which serves `alpha`: "
                   "continue it naming one of those, or start a new response.",
        "type": "NotFoundError", "param": "model", "code": 404}
    third = await client.responses.create(model="alpha", input="Third turn.",
                                          max_output_tokens=4, previous_response_id=second.id)
    assert third.model == "alpha" and third.previous_response_id == second.id
    # a new conversation follows the rule as before
    raw = await client.responses.with_raw_response.create(
        model="alpha", input="Elsewhere.", max_output_tokens=4, extra_headers={"x-turn": "beta"})
    assert raw.headers["x-kvroute-worker"] == "beta-0" and raw.parse().model == "beta"
    # a model no worker serves is the client's mistake, continuing or not: it was answered
    # by the holder's model, saying nothing
    with pytest.raises(openai.NotFoundError) as info:
        await client.responses.create(model="nope", input="Fourth turn.", max_output_tokens=4,
                                      previous_response_id=third.id)
    assert isinstance(info.value.body, dict)
    assert info.value.body["message"].startswith("The model `nope` does not exist.")
    await client.close()


@pytest.fixture(scope="module")
def adapter_on_one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    """Two workers keeping responses, one model; only the first has the adapter loaded."""
    yield from _keeping_fleet(tmp_path_factory, ("alpha",), [
        {"id": "alpha-0", "models": ["alpha"], "lora_adapters": {"chat": "/adapters/chat"}},
        {"id": "alpha-1", "models": ["alpha"]}])


async def test_a_rules_adapter_the_holder_lacks_is_set_aside_for_its_holder(
        adapter_on_one: FleetConfig, make_router: RouterFactory) -> None:
    """A rule picking an adapter that only another worker has: the model filter's fallback
    kept the holder (it serves the base model), with the adapter as the model, and the
    holder answered 404. The turn goes to the holder with the model the client asked for."""
    router = await make_router(adapter_on_one, ROUTING_ROUND_ROBIN + (
        "rules:\n  - name: chat-tier\n    when: {header: {x-tier: chat}}\n"
        "    then: {adapter: chat}\n"))
    client = client_of(router.url)
    for _ in range(4):            # round robin: a first turn on the worker without it
        raw = await client.responses.with_raw_response.create(
            model="alpha", input="First turn.", max_output_tokens=4)
        if raw.headers["x-kvroute-worker"] == "alpha-1":
            break
    assert raw.headers["x-kvroute-worker"] == "alpha-1"
    first = raw.parse()
    raw = await client.responses.with_raw_response.create(
        model="alpha", input="Second turn.", max_output_tokens=4,
        previous_response_id=first.id, extra_headers={"x-tier": "chat"})
    second = raw.parse()
    assert raw.headers["x-kvroute-worker"] == "alpha-1"
    assert second.model == "alpha" and second.previous_response_id == first.id
    assert raw.headers["x-kvroute-reason"].startswith(
        "continues a response only alpha-1 holds, which rule chat-tier left out (target chat)")
    # a new conversation of the tier goes to the worker with the adapter
    raw = await client.responses.with_raw_response.create(
        model="alpha", input="Elsewhere.", max_output_tokens=4, extra_headers={"x-tier": "chat"})
    assert raw.headers["x-kvroute-worker"] == "alpha-0" and raw.parse().model == "chat"
    await client.close()


@pytest.fixture(scope="module")
def adapter_unloadable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    """Two workers keeping responses with an adapter; the first's are loaded and unloaded
    at run time."""
    yield from _keeping_fleet(tmp_path_factory, ("alpha",), [
        {"id": "alpha-0", "models": ["alpha"], "lora_adapters": {"chat": "/adapters/chat"},
         "runtime_lora_updating": True},
        {"id": "alpha-1", "models": ["alpha"], "lora_adapters": {"chat": "/adapters/chat"}}])


async def test_a_turn_naming_an_adapter_its_holder_unloaded_is_a_404_saying_so(
        adapter_unloadable: FleetConfig, make_router: RouterFactory) -> None:
    """The holder unloaded the adapter the client names: the turn was sent with the holder's
    base model, which answered in the adapter's place."""
    router = await make_router(adapter_unloadable, ROUTING_ROUND_ROBIN, models_interval_s=0.1)
    spec = adapter_unloadable.workers[0]
    client = client_of(router.url)
    for _ in range(4):            # round robin: a first turn on the worker that unloads it
        raw = await client.responses.with_raw_response.create(
            model="chat", input="First turn.", max_output_tokens=4)
        if raw.headers["x-kvroute-worker"] == "alpha-0":
            break
    assert raw.headers["x-kvroute-worker"] == "alpha-0"
    first = raw.parse()
    assert first.model == "chat"
    async with aiohttp.ClientSession() as http, http.post(
            spec.info.url + "/v1/unload_lora_adapter", json={"lora_name": "chat"}) as resp:
        assert resp.status == 200, await resp.text()
    deadline = time.monotonic() + 10.0
    while any("chat" in view.lora_adapters for view in router.app[REGISTRY].views(0.0)
              if view.id == "alpha-0"):
        assert time.monotonic() < deadline, "the unload was never seen"
        await asyncio.sleep(0.05)
    with pytest.raises(openai.NotFoundError) as info:
        await client.responses.create(model="chat", input="Second turn.", max_output_tokens=4,
                                      previous_response_id=first.id)
    assert isinstance(info.value.body, dict)
    assert info.value.body["message"].startswith(
        "The model `chat` is not served by alpha-0, the worker holding the response this "
        "request continues (previous_response_id), which serves `alpha`:")
    second = await client.responses.create(model="alpha", input="Second turn.",
                                           max_output_tokens=4, previous_response_id=first.id)
    assert second.model == "alpha" and second.previous_response_id == first.id
    await client.close()


async def test_a_tenants_responses_are_not_another_tenants(
        fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """With its own key, any tenant read, continued and overwrote (by naming its id as the
    request_id of a new response) another tenant's response."""
    keys = tmp_path / "keys.yaml"
    keys.write_text("acme: sk-acme\nglobex: sk-globex\n")
    router = await make_router(fleet, ROUTING_ROUND_ROBIN, api_keys=("sk-operator",),
                               api_keys_file=keys)

    def as_key(key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key=key, max_retries=0)

    acme, globex, operator = as_key("sk-acme"), as_key("sk-globex"), as_key("sk-operator")
    made = await acme.responses.create(model=MODEL, input="The vault code is 7.",
                                       max_output_tokens=4)
    not_found = f"Response with id '{made.id}' not found"
    with pytest.raises(openai.NotFoundError, match=not_found):
        await globex.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError, match=not_found):
        await globex.responses.cancel(made.id)
    with pytest.raises(openai.NotFoundError, match=not_found):
        await globex.responses.create(model=MODEL, input="And?", max_output_tokens=2,
                                      previous_response_id=made.id)
    with pytest.raises(openai.BadRequestError, match="names another response"):
        await globex.responses.create(model=MODEL, input="Mine now.", max_output_tokens=2,
                                      extra_body={"request_id": made.id})
    assert (await acme.responses.retrieve(made.id)).output_text == made.output_text
    follow = await acme.responses.create(model=MODEL, input="And?", max_output_tokens=2,
                                         previous_response_id=made.id)
    assert follow.previous_response_id == made.id
    assert (await operator.responses.retrieve(made.id)).id == made.id   # the operator's key
    for client in (acme, globex, operator):
        await client.close()


async def test_a_response_whose_worker_was_renamed_by_a_fleet_reload_is_found(
        fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """The fleet file renamed the worker holding a response (the same server): its record
    named a worker no longer in the fleet, and every read or follow-up was a 503 to retry
    in a second, until the record expired (a week with Redis)."""
    import asyncio
    import os
    import time

    urls = {spec.info.id: spec.info.url for spec in fleet.workers}

    def fleet_text(names: dict[str, str]) -> str:
        return yaml.safe_dump({
            "models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192}},
            "workers": [{"id": new, "gpu": "h100", "models": [MODEL], "url": urls[old]}
                        for old, new in names.items()]})

    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text({"w0": "w0"}))
    router = await make_router(load_fleet(path), ROUTING_ROUND_ROBIN, reload_interval_s=0.05)
    client = client_of(router.url)
    made = await client.responses.create(model=MODEL, input="Remember 7.", max_output_tokens=4)
    before = path.stat().st_mtime_ns
    path.write_text(fleet_text({"w0": "renamed", "w1": "w1"}))
    os.utime(path, ns=(before + 10**9, before + 10**9))
    deadline = time.monotonic() + 10.0
    while router.metric("kvroute_fleet_reloads_total", result="success") < 1:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    raw = await client.responses.with_raw_response.create(
        model=MODEL, input="And?", max_output_tokens=2, previous_response_id=made.id)
    assert raw.headers["x-kvroute-worker"] == "renamed"
    assert (await client.responses.retrieve(made.id)).output_text == made.output_text
    await client.close()
