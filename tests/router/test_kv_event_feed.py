"""router/kv_event_feed.py: the router follows its workers' KV-event streams and routes on them.

Two emulator processes publish KV events over ZMQ on 127.0.0.1. Prompts are sent to one
worker directly, behind the router's back, so only the KV events can tell the router where
they are cached; routed through the router they must then land on that worker."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from router.keys import KV_EVENTS, REGISTRY
from router.kv_event_feed import KvEventFeed
from tests.router.gateway_support import MODEL, RouterFactory, RouterHandle
from workers.emulator.process import EmulatorProcess
from workers.fleet import FleetConfig, load_fleet, parse_fleet
from workers.ports import free_port

pytestmark = pytest.mark.integration

PREFIX_ONLY = """\
profiles:
  default:
    filters: [{type: model}, {type: healthy}]
    scorers: [{type: prefix, weight: 1.0}]
    picker: {type: max-score}
default_profile: default
"""


def _followed_fleet(ids: tuple[str, ...], replay: bool,
                    extra_args: tuple[str, ...] = ()) -> Iterator[FleetConfig]:
    """Emulated workers (one process each) whose KV events the router follows (``replay``:
    with a replay socket and a topic); ``extra_args`` for each emulator."""
    workers = []
    processes = []
    try:
        for wid in ids:
            pub, replay_port = free_port(), free_port()
            args = ["--kv-events", f"tcp://127.0.0.1:{pub}", *extra_args]
            entry: dict[str, object] = {"id": wid, "gpu": "h100", "models": [MODEL],
                                        "kv_events": f"tcp://127.0.0.1:{pub}"}
            if replay:
                args += ["--kv-events-replay", f"tcp://127.0.0.1:{replay_port}",
                         "--kv-events-topic", "kv"]
                entry["labels"] = {"kv_events_replay": f"tcp://127.0.0.1:{replay_port}",
                                   "kv_events_topic": "kv"}
            proc = EmulatorProcess(time_scale=0.0, served_model_names=[MODEL],
                                   extra_args=args)
            proc.start()
            processes.append(proc)
            workers.append({**entry, "url": proc.url})
        yield parse_fleet({"models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192}},
                           "workers": workers})
    finally:
        for proc in processes:
            proc.stop()


@pytest.fixture(scope="module")
def event_fleet() -> Iterator[FleetConfig]:
    yield from _followed_fleet(("w0", "w1"), replay=True)


async def complete(session: aiohttp.ClientSession, url: str,
                   prompt: list[int]) -> aiohttp.ClientResponse:
    async with session.post(f"{url}/v1/completions",
                            json={"model": MODEL, "prompt": prompt, "max_tokens": 1}) as resp:
        await resp.read()
        assert resp.status == 200, await resp.text()
        return resp


async def wait_for_blocks(router: RouterHandle, worker: str, at_least: int) -> None:
    feed = router.app[KV_EVENTS]
    deadline = time.monotonic() + 15.0
    # exact too: a router joining a running emulator replays its earlier batches first, and
    # their blocks may pass the count while the batch of the prompt sent is still held
    while feed.status()[worker]["blocks"] < at_least or not feed.status()[worker]["exact"]:
        assert time.monotonic() < deadline, feed.status()
        await asyncio.sleep(0.05)


async def test_prompts_cached_behind_the_routers_back_are_found_by_their_events(
        event_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(event_fleet, PREFIX_ONLY)
    urls = {w.info.id: w.info.url for w in event_fleet.workers}
    async with aiohttp.ClientSession() as session:
        for n, worker in enumerate(("w1", "w0", "w1")):
            prompt = [5000 + 100 * n + i for i in range(64)]      # four 16-token blocks
            before = router.app[KV_EVENTS].status()[worker]["blocks"]
            await complete(session, urls[worker], prompt)
            await wait_for_blocks(router, worker, before + 4)
            routed = await complete(session, router.url, prompt)
            assert routed.headers["x-kvroute-worker"] == worker
        async with session.get(f"{router.url}/debug/fleet") as resp:
            fleet = {w["id"]: w for w in (await resp.json())["data"]}
    for worker in ("w0", "w1"):
        status = fleet[worker]["kv_events"]
        assert status["exact"] is True and status["decode_errors"] == 0
        assert status["blocks"] >= 4


@pytest.fixture(scope="module")
def adapter_event_fleet() -> Iterator[FleetConfig]:
    """Two workers followed by their KV events, both with the adapter ``sql`` loaded."""
    yield from _followed_fleet(("a0", "a1"), replay=False,
                               extra_args=("--lora", "sql=/adapters/sql"))


async def test_an_adapters_blocks_are_found_by_their_events(
        adapter_event_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """vLLM hashes an adapter's blocks with its ("lora", name, path) key: the router, which
    hashed them without it, never found them in the events (and took the base model's
    blocks of the same prompt for them)."""
    router = await make_router(adapter_event_fleet, PREFIX_ONLY)
    urls = {w.info.id: w.info.url for w in adapter_event_fleet.workers}
    async with aiohttp.ClientSession() as session:
        deadline = time.monotonic() + 10.0
        while not all("sql" in view.lora_adapters for view in router.app[REGISTRY].views(0.0)):
            assert time.monotonic() < deadline, "the adapter was never seen loaded"
            await asyncio.sleep(0.05)
        for n, worker in enumerate(("a1", "a0", "a1")):
            prompt = [7000 + 100 * n + i for i in range(64)]      # four 16-token blocks
            before = router.app[KV_EVENTS].status()[worker]["blocks"]
            async with session.post(f"{urls[worker]}/v1/completions", json={
                    "model": "sql", "prompt": prompt, "max_tokens": 1}) as resp:
                assert resp.status == 200, await resp.text()
            await wait_for_blocks(router, worker, before + 4)
            async with session.post(f"{router.url}/v1/completions", json={
                    "model": "sql", "prompt": prompt, "max_tokens": 1}) as resp:
                assert resp.status == 200, await resp.text()
                assert resp.headers["x-kvroute-worker"] == worker
                # three of the four blocks (the last one is always computed again)
                assert resp.headers["x-kvroute-reason"].startswith(f"prefix 0.75 on {worker}")


async def test_a_hot_reloaded_engine_keeps_following_the_events(
        event_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(event_fleet, PREFIX_ONLY, reload_interval_s=0.05)
    router.routing_path.write_text(PREFIX_ONLY.replace("weight: 1.0", "weight: 2.0")
                                   + "# reloaded\n")
    deadline = time.monotonic() + 10.0
    while router.metric("kvroute_config_reloads_total", result="success") < 1:
        assert time.monotonic() < deadline, "the routing file was not reloaded"
        await asyncio.sleep(0.05)
    urls = {w.info.id: w.info.url for w in event_fleet.workers}
    prompt = [9000 + i for i in range(64)]
    async with aiohttp.ClientSession() as session:
        before = router.app[KV_EVENTS].status()["w1"]["blocks"]
        await complete(session, urls["w1"], prompt)
        await wait_for_blocks(router, "w1", before + 4)
        routed = await complete(session, router.url, prompt)
    assert routed.headers["x-kvroute-worker"] == "w1"


def test_a_fleet_without_streams_makes_an_inert_feed(event_fleet: FleetConfig) -> None:
    without = parse_fleet({"models": {MODEL: {"arch": "llama-3-8b"}},
                           "workers": [{"id": "x", "gpu": "h100", "models": [MODEL],
                                        "url": "http://127.0.0.1:1"}]})
    feed = KvEventFeed(w.info for w in without.workers)
    assert not feed.enabled and feed.index is None and feed.status() == {}
    followed = KvEventFeed(w.info for w in event_fleet.workers)
    assert followed.enabled and [s.worker_id for s in followed.sources] == ["w0", "w1"]


def test_forgetting_a_worker_drops_its_block_set(event_fleet: FleetConfig) -> None:
    from workers.engine.api import BlockStored
    from workers.kv_events.decode import KvEventBatch

    feed = KvEventFeed(w.info for w in event_fleet.workers)
    assert feed.index is not None
    feed.index.on_batch("w0", 0, KvEventBatch(ts=0.0, events=(BlockStored(
        block_hashes=(1,), parent_block_hash=None, token_ids=(), block_size=16,
        medium="GPU"),)))
    assert feed.status()["w0"]["exact"] and feed.status()["w0"]["blocks"] == 1
    feed.forget("w0")
    assert feed.status()["w0"]["blocks"] == 0 and not feed.status()["w0"]["exact"]
    KvEventFeed([]).forget("w0")                       # an inert feed: nothing to do


async def test_streams_named_by_a_reloaded_fleet_file_are_followed(
        event_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """A router started on a fleet without KV events: its feed is inert, until the fleet
    file names the streams; then prompts cached behind its back are found."""
    def fleet_text(with_events: bool) -> str:
        workers = []
        for spec in event_fleet.workers:
            info = spec.info
            entry: dict[str, object] = {"id": info.id, "gpu": "h100", "models": [MODEL],
                                        "url": info.url}
            if with_events:
                entry["kv_events"] = info.kv_events_endpoint
                entry["labels"] = dict(info.labels)
            workers.append(entry)
        return yaml.safe_dump({"models": {MODEL: {"arch": "llama-3-8b",
                                                  "max_model_len": 8192}},
                               "workers": workers})

    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text(False))
    router = await make_router(load_fleet(path), PREFIX_ONLY, reload_interval_s=0.05)
    assert not router.app[KV_EVENTS].enabled
    before = path.stat().st_mtime_ns
    path.write_text(fleet_text(True))
    os.utime(path, ns=(before + 10**9, before + 10**9))
    deadline = time.monotonic() + 10.0
    while router.metric("kvroute_fleet_reloads_total", result="success") < 1:
        assert time.monotonic() < deadline, "the fleet file was not reloaded"
        await asyncio.sleep(0.05)
    assert set(router.app[KV_EVENTS].status()) == {"w0", "w1"}
    urls = {w.info.id: w.info.url for w in event_fleet.workers}
    prompt = [12000 + i for i in range(64)]
    async with aiohttp.ClientSession() as session:
        # a SUB socket misses what is published before its subscription reaches the
        # publisher: prompts until the first batch arrives (later ones replay what it missed)
        deadline = time.monotonic() + 15.0
        while router.app[KV_EVENTS].status()["w1"]["batches"] == 0:
            assert time.monotonic() < deadline, router.app[KV_EVENTS].status()
            await complete(session, urls["w1"], [11000 + i for i in range(16)])
            await asyncio.sleep(0.05)
        before_blocks = router.app[KV_EVENTS].status()["w1"]["blocks"]
        await complete(session, urls["w1"], prompt)
        await wait_for_blocks(router, "w1", before_blocks + 4)
        routed = await complete(session, router.url, prompt)
    assert routed.headers["x-kvroute-worker"] == "w1"
