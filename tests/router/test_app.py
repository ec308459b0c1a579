"""The assembled app: routing reload without a restart, a bad file refused while the last
good one keeps serving."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from pathlib import Path

import aiohttp
import openai
import pytest
from aiohttp import web

from router.app import create_app
from router.keys import METRICS
from router.settings import Settings
from tests.router.gateway_support import (
    MODEL,
    REPO_ROOT,
    ROUTING_ROUND_ROBIN,
    RouterFactory,
    RouterHandle,
    short_chat,
    subset,
)
from workers.fleet import FleetConfig

pytestmark = pytest.mark.integration

FAST_PROFILE = """\
profiles:
  fast:
    filters: [{type: model}, {type: healthy}]
    scorers: [{type: queue-depth, weight: 2.0}]
    picker: {type: max-score}
default_profile: fast
"""

BAD = """\
profiles:
  fast:
    filters: [{type: model}]
    scorers: [{type: queue-depth, weight: heavy}]
    picker: {type: max-score}
default_profile: fast
"""


async def profile_of(router: RouterHandle) -> str:
    client = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)
    raw = await client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert raw.status_code == 200
    return raw.headers["x-kvroute-profile"]


async def wait_for_reloads(router: RouterHandle, result: str, count: float) -> None:
    deadline = time.monotonic() + 5.0
    while router.metric("kvroute_config_reloads_total", result=result) < count:
        assert time.monotonic() < deadline, f"no {result} reload"
        await asyncio.sleep(0.05)


async def test_reload_applies_good_file_and_refuses_bad_one(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["h100-fast", "a100-fast"]),
                               reload_interval_s=0.05)
    assert await profile_of(router) == "default"
    assert router.metric("kvroute_config_last_reload_successful") == 1.0
    started = router.metric("kvroute_config_last_reload_success_timestamp_seconds")
    assert abs(started - time.time()) < 60

    router.routing_path.write_text(FAST_PROFILE)
    await wait_for_reloads(router, "success", 1)
    assert await profile_of(router) == "fast"
    swapped = router.metric("kvroute_config_last_reload_success_timestamp_seconds")
    assert swapped >= started

    router.routing_path.write_text(BAD)
    await wait_for_reloads(router, "failure", 1)
    assert await profile_of(router) == "fast"          # the last good config keeps serving
    assert router.metric("kvroute_config_reloads_total", result="success") == 1.0
    # the file on disk is not the config in force, and since when that one serves
    assert router.metric("kvroute_config_last_reload_successful") == 0.0
    assert router.metric("kvroute_config_last_reload_success_timestamp_seconds") == swapped

    router.routing_path.write_text(FAST_PROFILE.replace("fast", "quick"))
    await wait_for_reloads(router, "success", 2)
    assert router.metric("kvroute_config_last_reload_successful") == 1.0


async def test_debug_routing_says_what_is_in_force_and_why_an_edit_was_refused(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """The reason of a refused edit was in the log only, and nothing over HTTP named the
    config in force."""
    import hashlib

    router = await make_router(subset(emulated_fleet, ["h100-fast"]), FAST_PROFILE,
                               reload_interval_s=0.05)

    async def status() -> dict[str, object]:
        async with aiohttp.ClientSession() as session, session.get(
                router.url + "/debug/routing") as resp:
            assert resp.status == 200
            data: dict[str, object] = await resp.json()
            return data

    first = await status()
    assert first["object"] == "routing" and first["path"] == str(router.routing_path)
    assert first["sha256"] == hashlib.sha256(FAST_PROFILE.encode()).hexdigest()
    assert first["file_is_in_force"] is True and first["last_refusal"] is None
    assert first["building_since"] is None
    assert first["warnings"] == []
    assert router.metric("kvroute_config_warnings") == 0.0
    assert str(first["summary"]).startswith("1 profile(s): fast (2 filters, 1 scorers")
    router.routing_path.write_text(BAD)
    await wait_for_reloads(router, "failure", 1)
    refused = await status()
    assert refused["sha256"] == first["sha256"]          # the last good one serves
    assert refused["file_is_in_force"] is False
    assert refused["last_refusal"] == {
        "at": pytest.approx(time.time(), abs=30),
        "reason": f"{router.routing_path}: profiles.fast.scorers[0].weight: must be a number, "
                  "got 'heavy' (line 4)"}
    assert refused["warnings"] == []
    router.routing_path.write_text(FAST_PROFILE.replace(", {type: healthy}", ""))
    await wait_for_reloads(router, "success", 1)
    fixed = await status()
    assert fixed["file_is_in_force"] is True and fixed["last_refusal"] is None
    assert fixed["warnings"] == ["profiles.fast.filters: no healthy filter: requests may go "
                                 "to workers whose last scrape failed or that keep failing "
                                 "requests"]
    assert router.metric("kvroute_config_warnings") == 1.0     # alert RoutingConfigWarnings
    assert isinstance(fixed["in_force_since"], float)
    assert isinstance(first["in_force_since"], float)
    assert fixed["in_force_since"] > first["in_force_since"]


async def test_two_replicas_share_inflight_through_redis(
        redis_url: str, emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    # (redis_url first: its server outlives the routers, which are stopped before it)
    fleet = subset(emulated_fleet, ["slow"])
    first = await make_router(fleet, redis_url=redis_url, replica_id="r1")
    second = await make_router(fleet, redis_url=redis_url, replica_id="r2")
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4000, "stream": True}
    async with aiohttp.ClientSession() as session:
        resp = await session.post(first.url + "/v1/chat/completions", json=body)
        await resp.content.readuntil(b"\n\n")             # in flight on r1
        deadline = time.monotonic() + 5.0
        while await inflight_seen(session, second) != 1:
            assert time.monotonic() < deadline, "r2 never saw r1's request"
            await asyncio.sleep(0.05)
        resp.close()
        deadline = time.monotonic() + 5.0
        while await inflight_seen(session, second) != 0:
            assert time.monotonic() < deadline, "r2 still counts the finished request"
            await asyncio.sleep(0.05)


async def test_replicas_share_what_they_routed_for_prefix_affinity(
        redis_url: str, make_router: RouterFactory, tmp_path: Path) -> None:
    """Each replica's prefix scorer knew only the prompts it had routed itself: a
    conversation whose turns a load balancer spread over two replicas lost its cache on
    every turn the other replica took (12 conversations of 6 turns moved 20 times)."""
    import yaml

    from tests.router.gateway_support import FAST, fleet_data
    from workers.emulator.process import EmulatorFleet
    from workers.fleet import load_fleet
    from workers.ports import free_port

    ids = ("h100-a", "h100-b")
    path = tmp_path / "twin.yaml"
    path.write_text(yaml.safe_dump(fleet_data(
        {wid: ("h100", {**FAST, "output_len": {"dist": "fixed", "value": 4}}) for wid in ids},
        {wid: free_port() for wid in ids})))
    fleet = load_fleet(path)
    with EmulatorFleet(fleet, one_process=True):
        first = await make_router(fleet, redis_url=redis_url, replica_id="r1")
        second = await make_router(fleet, redis_url=redis_url, replica_id="r2")
        conversations = [" ".join(f"conversation {c} fact {i} is {i * (c + 3)}."
                                  for i in range(300)) for c in range(4)]
        async with aiohttp.ClientSession() as session:
            firsts = [await _chat(session, first, text, None) for text in conversations]
            deadline = time.monotonic() + 10.0
            while second.metric("kvroute_state_store_routed_total",
                                direction="learnt") < len(conversations):
                assert time.monotonic() < deadline, "r2 never learnt r1's routes"
                await asyncio.sleep(0.05)
            # the second turn of each conversation reaches the other replica
            seconds = [await _chat(session, second, text, "and then?")
                       for text in conversations]
    assert seconds == firsts
    # r2 knew the prefix of the worker it chose, which it had never routed there itself
    # (idle twins: both replicas break the tie alike, so the workers alone would not tell)
    known = sum(sample.value for family in second.app[METRICS].registry.collect()
                for sample in family.samples
                if sample.name == "kvroute_prefix_known_chosen_tokens_total")
    assert known >= 4 * 1000
    assert first.metric("kvroute_state_store_routed_total", direction="published") >= 4


async def _chat(session: aiohttp.ClientSession, router: RouterHandle, text: str,
                follow_up: str | None) -> str:
    messages = [{"role": "user", "content": text}]
    if follow_up is not None:
        messages += [{"role": "assistant", "content": "noted"},
                     {"role": "user", "content": follow_up}]
    async with session.post(router.url + "/v1/chat/completions",
                            json={"model": MODEL, "messages": messages, "max_tokens": 4}) as resp:
        assert resp.status == 200, await resp.text()
        return resp.headers["x-kvroute-worker"]


async def inflight_seen(session: aiohttp.ClientSession, router: RouterHandle) -> int:
    async with session.get(router.url + "/debug/fleet") as resp:
        [worker] = (await resp.json())["data"]
        return int(worker["inflight_requests"])


async def test_routes_another_replica_shares_for_a_worker_not_in_this_fleet_are_not_learnt(
        redis_url: str, emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """Another replica's fleet may hold workers this one does not (one removed here
    already, or not yet added): what it routed there would take a place in this router's
    prefix index that nothing frees."""
    from policies.scorers.prefix import PrefixScorer
    from router.keys import POLICY
    from router.state.redis_store import RedisStateStore

    router = await make_router(subset(emulated_fleet, ["h100-fast"]), redis_url=redis_url,
                               replica_id="r1")
    (index,) = [plugin.index for _, _, plugin in router.app[POLICY].engine.plugins()
                if isinstance(plugin, PrefixScorer)]
    async with aiohttp.ClientSession() as session:     # a decision reads its block size
        assert (await short_chat(session, router))[0] == 200
    learnt_before = index.blocks("h100-fast")       # (the chat's own prompt)
    other = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    await other.start()
    try:
        other.on_routed_blocks("elsewhere", {16: [11, 12, 13]})
        other.on_routed_blocks("h100-fast", {16: [21, 22]})
        deadline = time.monotonic() + 5.0
        while index.blocks("h100-fast") < 2 + learnt_before:
            assert time.monotonic() < deadline, "the shared route never arrived"
            await asyncio.sleep(0.02)
    finally:
        await other.close()
    assert index.blocks("elsewhere") == 0
    assert index.slots_in_use() == 1


async def test_client_connections_use_tcp_nodelay(emulated_fleet: FleetConfig) -> None:
    fleet = subset(emulated_fleet, ["h100-fast"])
    settings = Settings(fleet_path=Path(fleet.source), routing_path=REPO_ROOT /
                        "config/routing.yaml", port=0)
    app = create_app(settings, fleet)
    seen: list[int] = []

    async def record(request: web.Request, response: web.StreamResponse) -> None:
        sock = request.transport.get_extra_info("socket") if request.transport else None
        seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) if sock else -1)
    app.on_response_prepare.append(record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        async with aiohttp.ClientSession() as session, session.get(
                f"http://127.0.0.1:{port}/health") as resp:
            assert resp.status == 200
    finally:
        await runner.cleanup()
    assert seen == [1]


async def test_an_engine_restarted_behind_the_router_loses_what_the_router_knew(
        make_router: RouterFactory) -> None:
    """A restarted engine's cache is empty: the prefix scorer's routing history of it went on
    sending a conversation there for a prefix of 1,504 tokens it no longer held. And the
    failures of the engine before it are not its: the connections refused while it was
    down left the worker ejected (here one ejects) after it was back."""
    from policies.scorers.prefix import PrefixScorer
    from router.keys import POLICY
    from tests.router.gateway_support import fleet_entry, url_fleet
    from workers.emulator.process import EmulatorProcess
    from workers.ports import free_port

    port = free_port()
    first = EmulatorProcess(gpu="h100", port=port, time_scale=0.0,
                            served_model_names=[MODEL]).start()
    try:
        router = await make_router(url_fleet({"k0": first.url}), scrape_interval_s=0.05,
                                   eject_after=1, fail_threshold=10_000)
        prefix = next(plugin for _, _, plugin in router.app[POLICY].engine.plugins()
                      if isinstance(plugin, PrefixScorer))
        messages = [{"role": "user", "content": "a long system prompt " * 100}]
        api = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused")
        await api.chat.completions.create(model=MODEL, messages=messages,  # type: ignore[arg-type]
                                          max_tokens=2)
        assert prefix.index.blocks("k0") > 0
        await asyncio.sleep(0.3)          # scraped with the first engine's counters
    finally:
        first.stop()
    with pytest.raises(openai.APIStatusError):          # refused: the worker is ejected
        await openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused",
                                 max_retries=0).chat.completions.create(
            model=MODEL, messages=messages, max_tokens=2)  # type: ignore[arg-type]
    assert (await fleet_entry(router, "k0"))["ejected_for_s"] > 0
    second = EmulatorProcess(gpu="h100", port=port, time_scale=0.0,
                             served_model_names=[MODEL]).start()
    try:
        deadline = time.monotonic() + 15
        while prefix.index.blocks("k0") > 0:
            assert time.monotonic() < deadline, "the restart was not seen"
            await asyncio.sleep(0.05)
        assert (await fleet_entry(router, "k0"))["ejected_for_s"] == 0
    finally:
        second.stop()


async def test_a_busy_workers_503_is_relayed_and_does_not_eject_it(
        make_router: RouterFactory) -> None:
    """vLLM's 503 for a full queue (``--max-num-queued-reqs``) reached the client as a 502
    with no ``Retry-After``, and counted toward ejecting the worker: a busy engine was set
    aside (here, one failure ejects), its load piled onto the others."""
    from tests.router.gateway_support import fleet_entry, url_fleet
    from tests.workers.emulator.emulator_fixtures import metrics_text, sample
    from workers.emulator.process import EmulatorProcess

    with EmulatorProcess(gpu="h100", time_scale=1.0, served_model_names=[MODEL],
                         emulate={"max_num_seqs": 1, "max_num_queued_reqs": 1}) as worker:
        # round robin: the default profile holds a request back from a full worker itself
        # (its decode guard), so the worker's own queue might never fill
        router = await make_router(url_fleet({"k0": worker.url}), ROUTING_ROUND_ROBIN,
                                   scrape_interval_s=0.05, eject_after=1, fail_threshold=10_000)
        api = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)

        async def engine_count(name: str) -> float:
            return await asyncio.to_thread(lambda: sample(metrics_text(worker.url), name,
                                                          model_name=MODEL))

        async def until_engine(name: str) -> None:
            # the engine's own count (the router's view adds what it sent and the engine may
            # not have taken yet: the next request could reach it first, and wait in its place)
            deadline = time.monotonic() + 10
            while await engine_count(name) < 1:
                assert time.monotonic() < deadline, f"never 1: {name}"
                await asyncio.sleep(0.05)

        held: list[asyncio.Task[object]] = []
        try:
            # one by one: a request arriving before the engine took the one before from its
            # queue would find the queue full (as on vLLM)
            for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
                held.append(asyncio.create_task(api.completions.create(
                    model=MODEL, prompt="Tell me a story.", max_tokens=3000,
                    extra_body={"ignore_eos": True})))
                await until_engine(name)
            with pytest.raises(openai.InternalServerError) as busy:
                await api.completions.create(model=MODEL, prompt="hi", max_tokens=2)
            assert busy.value.status_code == 503
            assert busy.value.response.headers["Retry-After"] == "1"
            assert isinstance(busy.value.body, dict)
            assert busy.value.body["code"] == "workers_busy", busy.value.body
            assert "The engine is currently busy" in busy.value.body["message"]
            assert busy.value.response.headers["x-kvroute-reason"].startswith("workers-busy")
            assert (await fleet_entry(router, "k0"))["ejected_for_s"] == 0
        finally:
            for task in held:        # their clients leave: the worker aborts them
                task.cancel()
            await asyncio.gather(*held, return_exceptions=True)
        deadline = time.monotonic() + 10
        while True:                  # served again once the queue is free
            try:
                reply = await api.completions.create(model=MODEL, prompt="hi", max_tokens=2)
                break
            except openai.InternalServerError:
                assert time.monotonic() < deadline, "the worker stayed busy"
                await asyncio.sleep(0.1)
        assert reply.choices[0].text


PREFER_PLUGIN = '''
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PreferParams:
    worker: str = ""


class PreferScorer:
    def __init__(self, name, params):
        self.name = name
        self.worker = params.worker

    def score(self, request, workers, cycle):
        return {w.id: 1.0 if w.id == self.worker else 0.0 for w in workers}


def register(registry):
    registry.register("prefer", "scorer", PreferParams,
                      lambda params, ctx: PreferScorer(ctx.name, params))
'''

PREFER_ROUTING = """\
plugin_modules: [plugins/prefer.py]
profiles:
  default:
    filters: [{type: model}, {type: healthy}]
    scorers: [{type: prefer, params: {worker: a100-fast}}]
"""


async def test_a_plugin_file_routes_and_its_edit_reloads_live(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """A scorer of the operator's own, in a file beside the routing file, decides; editing
    that file alone (not the routing file) swaps the new code in."""
    plugin = tmp_path / "plugins" / "prefer.py"
    plugin.parent.mkdir()
    plugin.write_text(PREFER_PLUGIN)
    router = await make_router(subset(emulated_fleet, ["h100-fast", "a100-fast"]),
                               PREFER_ROUTING, reload_interval_s=0.05)
    assert router.routing_path.parent == tmp_path
    assert await workers_chosen(router, 6) == {"a100-fast"}
    # the new code scores the other worker, whatever the routing file asks
    plugin.write_text(PREFER_PLUGIN.replace("if w.id == self.worker", "if w.id != self.worker"))
    await wait_for_reloads(router, "success", 1)
    assert await workers_chosen(router, 6) == {"h100-fast"}
    plugin.write_text("def register(registry):\n    pass\n")      # its type gone: refused
    await wait_for_reloads(router, "failure", 1)
    assert await workers_chosen(router, 4) == {"h100-fast"}       # the last good code serves


async def test_plugin_edits_reloaded_live_leave_the_versions_in_use_loaded(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """Each edit of a plugin file left its module in ``sys.modules`` for the life of the
    router; now a version leaves once the config that replaced it serves and no request
    holds the old one, while the router serves on with each new version."""
    plugin = tmp_path / "plugins" / "prefer.py"
    plugin.parent.mkdir()
    plugin.write_text(PREFER_PLUGIN)
    router = await make_router(subset(emulated_fleet, ["h100-fast", "a100-fast"]),
                               PREFER_ROUTING, reload_interval_s=0.05)
    assert await workers_chosen(router, 2) == {"a100-fast"}
    assert len(loaded_versions(plugin)) == 1
    for edit in range(1, 9):
        # flipped between two versions, and every third edit one never seen before
        flipped = edit % 2 == 1
        code = (PREFER_PLUGIN.replace("if w.id == self.worker", "if w.id != self.worker")
                if flipped else PREFER_PLUGIN)
        plugin.write_text(code + ("" if edit % 3 else f"\nEDIT = {edit}\n"))
        await wait_for_reloads(router, "success", edit)
        assert await workers_chosen(router, 2) == {"h100-fast" if flipped else "a100-fast"}
        assert 1 <= len(loaded_versions(plugin)) <= 2
    assert len(loaded_versions(plugin)) == 1


async def workers_chosen(router: RouterHandle, count: int) -> set[str]:
    """The workers ``count`` chat requests in a row went to."""
    client = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)
    chosen = set()
    for _ in range(count):
        raw = await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        assert raw.status_code == 200
        chosen.add(raw.headers["x-kvroute-worker"])
    return chosen


def loaded_versions(plugin: Path) -> list[str]:
    """The names in ``sys.modules`` of the modules loaded from ``plugin``, one per version."""
    return [name for name, module in list(sys.modules.items())
            if name.startswith("kvroute_plugin_")
            and getattr(module, "__file__", None) == str(plugin)]


async def test_the_router_keeps_its_redis_keys_under_its_prefix(
        redis_url: str, emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    import redis.asyncio as aioredis

    await make_router(subset(emulated_fleet, ["h100-fast"]), redis_url=redis_url,
                      replica_id="r1", redis_key_prefix="team-a:")
    client = aioredis.from_url(redis_url, decode_responses=True)
    try:
        deadline = time.monotonic() + 5.0
        while await client.zscore("team-a:replicas", "r1") is None:
            assert time.monotonic() < deadline, "the replica never published under its prefix"
            await asyncio.sleep(0.02)
        keys = await client.keys("*")
        assert keys and all(key.startswith("team-a:") for key in keys), keys
    finally:
        await client.aclose()
