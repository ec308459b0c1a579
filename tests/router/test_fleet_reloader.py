"""router/fleet_reloader.py: workers added to, removed from or declared anew in the fleet file
take effect without a restart; a file the router would refuse at start leaves the fleet in
force serving.

The workers are the session's emulated ones (one emulator process), reached by URL from a
fleet file the test rewrites while a router on 127.0.0.1 serves it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from yarl import URL

from router.keys import FLEET_RELOADER, METRICS
from tests.router.gateway_support import (
    MODEL,
    ROUTING_ROUND_ROBIN,
    FrontedWorker,
    RouterFactory,
    RouterHandle,
    fleet_entry,
    short_chat,
)
from workers.fleet import FleetConfig, load_fleet

pytestmark = pytest.mark.integration


def fleet_text(urls: dict[str, str], **extra: dict[str, Any]) -> str:
    """A fleet file of H100 workers reached by URL; ``extra[id]`` adds fields to a worker."""
    return yaml.safe_dump({
        "models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192}},
        "workers": [{"id": wid, "gpu": "h100", "models": [MODEL], "url": url,
                     **extra.get(wid, {})} for wid, url in urls.items()]})


def rewrite(path: Path, text: str) -> None:
    """Write ``text``, moving the modification time on (a rewrite within one clock tick of
    the same size would otherwise look unchanged)."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def urls_of(fleet: FleetConfig, *ids: str) -> dict[str, str]:
    by_id = {spec.info.id: spec.info.url for spec in fleet.workers}
    return {wid: by_id[wid] for wid in ids}


async def reloads(router: RouterHandle, result: str, count: float) -> None:
    """Wait until the router counted ``count`` fleet reloads with ``result``."""
    deadline = time.monotonic() + 10.0
    while router.metric("kvroute_fleet_reloads_total", result=result) < count:
        assert time.monotonic() < deadline, f"no {result} reload"
        await asyncio.sleep(0.02)


async def workers_reached(router: RouterHandle, requests: int) -> set[str]:
    async with aiohttp.ClientSession() as session:
        answers = [await short_chat(session, router) for _ in range(requests)]
    assert {status for status, _ in answers} == {200}, answers
    return {worker for _, worker in answers}


async def start(make_router: RouterFactory, path: Path) -> RouterHandle:
    return await make_router(load_fleet(path), ROUTING_ROUND_ROBIN, reload_interval_s=0.05)


async def test_workers_added_and_removed_take_requests_from_the_next_request_on(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text(urls_of(emulated_fleet, "h100-fast")))
    router = await start(make_router, path)
    assert await workers_reached(router, 4) == {"h100-fast"}

    rewrite(path, fleet_text(urls_of(emulated_fleet, "h100-fast", "a100-fast")))
    await reloads(router, "success", 1)
    # the new worker was scraped before the fleet took it: healthy from the reload on
    assert (await fleet_entry(router, "a100-fast"))["healthy"]
    assert await workers_reached(router, 6) == {"h100-fast", "a100-fast"}

    rewrite(path, fleet_text(urls_of(emulated_fleet, "slow")))   # every worker replaced
    await reloads(router, "success", 2)
    assert await workers_reached(router, 1) == {"slow"}          # no 503 meanwhile
    rewrite(path, fleet_text(urls_of(emulated_fleet, "a100-fast")))
    await reloads(router, "success", 3)
    assert await workers_reached(router, 4) == {"a100-fast"}
    async with aiohttp.ClientSession() as session, session.get(
            f"{router.url}/debug/fleet") as resp:
        assert [w["id"] for w in (await resp.json())["data"]] == ["a100-fast"]
    assert router.metric("kvroute_fleet_last_reload_successful") == 1.0
    assert router.app[FLEET_RELOADER].fleet.source == str(path)


async def test_an_edit_made_while_the_router_starts_is_applied(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """The fleet is read before the router starts (kvroute up starts its emulators first, a
    routing file's classifier may train for minutes); the reloader stamped and hashed the
    file only when it was made, so an edit in between was taken for the fleet in force:
    never applied, nothing logged, kvroute_fleet_last_reload_successful 1."""
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text(urls_of(emulated_fleet, "h100-fast")))
    fleet = load_fleet(path)                                  # read at start ...
    rewrite(path, fleet_text(urls_of(emulated_fleet, "h100-fast", "a100-fast")))  # ... edited
    router = await make_router(fleet, ROUTING_ROUND_ROBIN, reload_interval_s=0.05)
    await reloads(router, "success", 1)
    assert await workers_reached(router, 6) == {"h100-fast", "a100-fast"}


async def test_a_fleet_unchanged_since_it_was_read_is_not_reloaded(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text(urls_of(emulated_fleet, "h100-fast")))
    router = await start(make_router, path)
    await asyncio.sleep(0.3)                                  # several polls
    assert router.metric("kvroute_fleet_reloads_total", result="success") == 0.0
    assert router.metric("kvroute_fleet_reloads_total", result="failure") == 0.0


async def test_a_file_that_is_not_utf8_is_refused_naming_why(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """Saved in Latin-1 (a comment's accent), it was refused with a UnicodeDecodeError's
    traceback in the log; ``kvroute validate --fleet`` and the start crashed on it."""
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text(urls_of(emulated_fleet, "h100-fast")))
    router = await start(make_router, path)
    with caplog.at_level(logging.ERROR, logger="router.fleet_reloader"):
        before = path.stat().st_mtime_ns
        path.write_bytes(b"# r\xe9gion eu\n"
                         + fleet_text(urls_of(emulated_fleet, "a100-fast")).encode())
        os.utime(path, ns=(before + 10**9, before + 10**9))
        await reloads(router, "failure", 1)
    assert "not UTF-8 text" in caplog.text
    assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)
    assert await workers_reached(router, 2) == {"h100-fast"}


async def test_a_file_the_router_would_refuse_at_start_leaves_the_fleet_in_force(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "fleet.yaml"
    good = fleet_text(urls_of(emulated_fleet, "h100-fast"))
    path.write_text(good)
    router = await start(make_router, path)
    refusals = [
        ("workers: [{id: a, gpu: h100}\n", "invalid YAML"),
        (fleet_text(urls_of(emulated_fleet, "a100-fast"), **{"a100-fast": {"gpu": "tpu"}}),
         "unknown GPU class"),
        (fleet_text(urls_of(emulated_fleet, "a100-fast"),
                    **{"a100-fast": {"api_key_env": "KVROUTE_TEST_UNSET_KEY_VARIABLE"}}),
         "KVROUTE_TEST_UNSET_KEY_VARIABLE"),
        # a GPU given as a list crashed the parser: logged, never counted as refused
        (fleet_text(urls_of(emulated_fleet, "a100-fast"), **{"a100-fast": {"gpu": ["a100"]}}),
         "must be a GPU class name"),
    ]
    with caplog.at_level(logging.ERROR, logger="router.fleet_reloader"):
        for count, (text, reason) in enumerate(refusals, 1):
            rewrite(path, text)
            await reloads(router, "failure", count)
            assert reason in caplog.text
            assert router.metric("kvroute_fleet_last_reload_successful") == 0.0
            assert await workers_reached(router, 2) == {"h100-fast"}
    assert router.metric("kvroute_fleet_reloads_total", result="success") == 0.0
    rewrite(path, fleet_text(urls_of(emulated_fleet, "a100-fast")))
    await reloads(router, "success", 1)
    assert router.metric("kvroute_fleet_last_reload_successful") == 1.0
    assert await workers_reached(router, 2) == {"a100-fast"}


async def test_a_file_whose_reading_fails_unforeseen_is_refused_and_counted(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """An error the parser did not foresee (a TypeError, a ValueError) escaped the reloader:
    logged as a crash, no refusal counted, kvroute_fleet_last_reload_successful left at 1,
    so FleetConfigRefused could not fire. It is a refusal like any other now."""
    import router.fleet_reloader as fleet_reloader

    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text(urls_of(emulated_fleet, "h100-fast")))
    router = await start(make_router, path)

    def unforeseen(_: object, content: bytes | None = None) -> FleetConfig:
        raise TypeError("unhashable type: 'list'")

    monkeypatch.setattr(fleet_reloader, "load_fleet", unforeseen)
    with caplog.at_level(logging.ERROR, logger="router.fleet_reloader"):
        rewrite(path, fleet_text(urls_of(emulated_fleet, "a100-fast")))
        await reloads(router, "failure", 1)
    assert "refused, the fleet in force stays: reading it failed" in caplog.text
    assert "unhashable type" in caplog.text
    assert router.metric("kvroute_fleet_last_reload_successful") == 0.0
    assert await workers_reached(router, 2) == {"h100-fast"}
    monkeypatch.setattr(fleet_reloader, "load_fleet", load_fleet)
    rewrite(path, fleet_text(urls_of(emulated_fleet, "a100-fast")) + "# saved again\n")
    await reloads(router, "success", 1)
    assert await workers_reached(router, 2) == {"a100-fast"}


async def test_a_fleet_the_routing_file_in_force_cannot_serve_is_refused_naming_the_rule(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "fleet.yaml"
    urls = urls_of(emulated_fleet, "h100-fast", "a100-fast")
    labels = {"h100-fast": {"labels": {"pool": "premium"}}}
    path.write_text(fleet_text(urls, **labels))
    routing = ROUTING_ROUND_ROBIN + """\
rules:
  - when: {header: {x-tier: gold}}
    then: {pool: {pool: premium}}
"""
    router = await make_router(load_fleet(path), routing, reload_interval_s=0.05)
    with caplog.at_level(logging.ERROR, logger="router.fleet_reloader"):
        rewrite(path, fleet_text(urls))            # the premium pool's only worker relabelled
        await reloads(router, "failure", 1)
    assert "rules[0].then.pool" in caplog.text
    async with aiohttp.ClientSession() as session, session.post(
            f"{router.url}/v1/chat/completions", headers={"x-tier": "gold"},
            json={"model": MODEL, "max_tokens": 2,
                  "messages": [{"role": "user", "content": "hi"}]}) as resp:
        assert resp.status == 200
        assert resp.headers["x-kvroute-worker"] == "h100-fast"


async def test_a_stream_on_a_removed_worker_finishes_there(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text(urls_of(emulated_fleet, "slow")))
    router = await start(make_router, path)
    async with aiohttp.ClientSession() as session, session.post(
            f"{router.url}/v1/chat/completions",
            json={"model": MODEL, "max_tokens": 40, "stream": True,
                  "messages": [{"role": "user", "content": "hi"}]}) as resp:
        assert resp.status == 200
        assert resp.headers["x-kvroute-worker"] == "slow"
        first = await resp.content.readline()
        assert first.startswith(b"data: ")
        rewrite(path, fleet_text(urls_of(emulated_fleet, "h100-fast")))
        await reloads(router, "success", 1)
        rest = await resp.content.read()
    assert rest.rstrip().endswith(b"data: [DONE]")
    assert b'"error"' not in rest
    assert await workers_reached(router, 2) == {"h100-fast"}
    # what the stream's end recorded of the removed worker went with it
    assert worker_series(router, "slow") == []


def worker_series(router: RouterHandle, worker: str) -> list[str]:
    """The names of the router's samples labelled ``worker``."""
    return [sample.name for family in router.app[METRICS].registry.collect()
            for sample in family.samples if sample.labels.get("worker") == worker]


def connections_to(port: int) -> int:
    """This process's established TCP connections to 127.0.0.1:``port`` (the router under
    test runs in it): /proc/net/tcp's sockets of this process's file descriptors."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state, inode = fields[2], fields[3], fields[9]
        if state == "01" and inode in inodes and int(remote.split(":")[1], 16) == port:
            count += 1
    return count


async def test_a_removed_worker_leaves_no_series_connections_or_ejection_behind(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """A worker removed from the fleet file, its server still up (a pod scaled down, or
    renamed): its Prometheus series stayed for the life of the process (some sixty per id:
    a fleet whose workers take new ids grew without bound), and so did the router's idle
    connections to it; an id added again inherited the ejection of its former declaration."""
    path = tmp_path / "fleet.yaml"
    urls = urls_of(emulated_fleet, "h100-fast", "failing")
    path.write_text(fleet_text(urls))
    router = await start(make_router, path)
    failing_port = URL(urls["failing"]).port
    assert failing_port is not None
    async with aiohttp.ClientSession() as session:
        for _ in range(12):      # round robin: "failing" fails every time and is ejected
            await short_chat(session, router)
    assert (await fleet_entry(router, "failing"))["ejected_for_s"] > 0
    assert {"kvroute_requests_total", "kvroute_retries_total",
            "kvroute_worker_ejections_total"} <= set(worker_series(router, "failing"))
    assert connections_to(failing_port) > 0        # kept alive after its answers

    rewrite(path, fleet_text(urls_of(emulated_fleet, "h100-fast")))
    await reloads(router, "success", 1)
    assert worker_series(router, "failing") == []
    assert worker_series(router, "h100-fast")        # the others' series stay
    # closed, though its server is up: the idle ones at the reload, as the loop next turns,
    # one in use (a scrape under way) when its answer ends
    for _ in range(50):
        if connections_to(failing_port) == 0:
            break
        await asyncio.sleep(0.02)
    assert connections_to(failing_port) == 0

    rewrite(path, fleet_text(urls))                   # the same declaration, back again
    await reloads(router, "success", 2)
    assert (await fleet_entry(router, "failing"))["ejected_for_s"] == 0
    assert router.metric("kvroute_worker_ejections_total", worker="failing") == 0
    # its retries after a 5xx exported from 0 again, as at the start
    assert router.app[METRICS].registry.get_sample_value("kvroute_retries_total", {
        "worker": "failing", "reason": "http_5xx", "model": MODEL}) == 0.0


async def test_a_removed_worker_is_forgotten_when_its_last_request_ends(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """Two streams in flight on a removed worker: the first to end leaves its series (the
    other still records there), the last one takes them along."""
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text(urls_of(emulated_fleet, "slow")))
    router = await start(make_router, path)
    body = {"model": MODEL, "max_tokens": 40, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session:
        first = await session.post(f"{router.url}/v1/chat/completions", json=body)
        second = await session.post(f"{router.url}/v1/chat/completions",   # ends well after
                                    json={**body, "max_tokens": 160})
        for resp in (first, second):
            assert resp.status == 200 and resp.headers["x-kvroute-worker"] == "slow"
            assert (await resp.content.readline()).startswith(b"data: ")
        rewrite(path, fleet_text(urls_of(emulated_fleet, "h100-fast")))
        await reloads(router, "success", 1)
        assert worker_series(router, "slow") == []          # gone at the removal
        assert (await first.content.read()).rstrip().endswith(b"data: [DONE]")
        first.release()
        assert "kvroute_requests_total" in worker_series(router, "slow")   # one still there
        assert (await second.content.read()).rstrip().endswith(b"data: [DONE]")
        second.release()
    assert worker_series(router, "slow") == []              # its last request took them


class HeldWorker(FrontedWorker):
    """Each request sent to it is held until ``release()``, then its connection is cut
    without an answer: a request that fails after the fleet file changed under it."""

    def __init__(self, backend: str) -> None:
        super().__init__(backend, self._hold)
        self.held = 0
        self._release = asyncio.Event()

    async def __aexit__(self, *exc: object) -> None:
        self._release.set()
        await super().__aexit__(*exc)

    def release(self) -> None:
        self._release.set()

    async def _hold(self, request: web.Request) -> web.Response:
        await request.read()
        self.held += 1
        await self._release.wait()
        assert request.transport is not None
        request.transport.abort()             # no answer: the router's attempt fails
        return web.Response()


async def until_held(worker: HeldWorker, count: int) -> None:
    deadline = time.monotonic() + 10.0
    while worker.held < count:
        assert time.monotonic() < deadline, "the request never reached the held worker"
        await asyncio.sleep(0.02)


async def test_a_utility_request_failing_on_a_removed_worker_leaves_it_no_series(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """A ``/tokenize`` sent to a worker that the fleet file removes before it fails: its
    failure is not recorded under the removed worker (a retry series that nothing frees)."""
    path = tmp_path / "fleet.yaml"
    async with HeldWorker(urls_of(emulated_fleet, "a100-fast")["a100-fast"]) as held:
        path.write_text(fleet_text({"held": held.url}))
        router = await make_router(load_fleet(path), ROUTING_ROUND_ROBIN,
                                   reload_interval_s=0.05, eject_after=1)
        async with aiohttp.ClientSession() as session:
            sent = asyncio.ensure_future(session.post(
                f"{router.url}/tokenize", json={"model": MODEL, "prompt": "hi"}))
            await until_held(held, 1)
            rewrite(path, fleet_text(urls_of(emulated_fleet, "h100-fast")))
            await reloads(router, "success", 1)
            assert worker_series(router, "held") == []
            held.release()
            async with await sent as resp:
                assert resp.status == 502
                assert (await resp.json())["error"]["type"] == "upstream_error"
    assert worker_series(router, "held") == []


async def test_a_failure_at_a_server_whose_id_was_declared_anew_does_not_eject_the_new_one(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """The fleet file gives an id another server while a request is in flight at the old
    one: the old one's failure is not counted toward ejecting the new one (here one
    failure ejects), which serves the next request."""
    path = tmp_path / "fleet.yaml"
    async with HeldWorker(urls_of(emulated_fleet, "a100-fast")["a100-fast"]) as held:
        path.write_text(fleet_text({"w": held.url}))
        router = await make_router(load_fleet(path), ROUTING_ROUND_ROBIN,
                                   reload_interval_s=0.05, eject_after=1)
        async with aiohttp.ClientSession() as session:
            sent = asyncio.ensure_future(session.post(
                f"{router.url}/v1/chat/completions", json={
                    "model": MODEL, "max_tokens": 2,
                    "messages": [{"role": "user", "content": "hi"}]}))
            await until_held(held, 1)
            rewrite(path, fleet_text({"w": urls_of(emulated_fleet, "h100-fast")["h100-fast"]}))
            await reloads(router, "success", 1)
            held.release()
            async with await sent as resp:
                assert resp.status == 502       # the only worker was tried: nothing left
            assert (await fleet_entry(router, "w"))["ejected_for_s"] == 0
            assert await short_chat(session, router) == (200, "w")
        assert router.metric("kvroute_worker_ejections_total", worker="w") == 0


async def test_relabelling_every_worker_keeps_them_serving(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """A label added to every worker dropped their snapshots: all unhealthy until their next
    scrape, every request a 503 meanwhile (the next scrape is a minute away here)."""
    path = tmp_path / "fleet.yaml"
    urls = urls_of(emulated_fleet, "h100-fast", "a100-fast")
    path.write_text(fleet_text(urls))
    router = await make_router(load_fleet(path), ROUTING_ROUND_ROBIN, reload_interval_s=0.05,
                               scrape_interval_s=60.0)
    rewrite(path, fleet_text(urls, **{w: {"labels": {"zone": "b"}, "price_per_hour": 9.0}
                                      for w in urls}))
    await reloads(router, "success", 1)
    assert await workers_reached(router, 4) == {"h100-fast", "a100-fast"}
    entry = await fleet_entry(router, "a100-fast")
    assert entry["healthy"] and entry["labels"] == {"zone": "b"}


async def test_a_refused_fleet_is_tried_again_when_saved_or_when_the_routing_file_changes(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """A fleet dropping a pool and the routing file dropping its rule, deployed together: the
    fleet read first was refused, and stayed refused once the rule had gone."""
    path = tmp_path / "fleet.yaml"
    urls = urls_of(emulated_fleet, "h100-fast", "a100-fast")
    path.write_text(fleet_text(urls, **{"h100-fast": {"labels": {"pool": "premium"}}}))
    rule = "rules:\n  - when: {header: {x-tier: gold}}\n    then: {pool: {pool: premium}}\n"
    router = await make_router(load_fleet(path), ROUTING_ROUND_ROBIN + rule,
                               reload_interval_s=0.05)
    rewrite(path, fleet_text(urls))                     # the premium pool goes
    await reloads(router, "failure", 1)
    before = path.stat().st_mtime_ns
    os.utime(path, ns=(before + 10**9, before + 10**9))   # saved again, unchanged
    await reloads(router, "failure", 2)
    router.routing_path.write_text(ROUTING_ROUND_ROBIN + "# the rule is gone\n")
    await reloads(router, "success", 1)
    assert router.metric("kvroute_fleet_last_reload_successful") == 1.0
    assert (await fleet_entry(router, "h100-fast"))["labels"] == {}


async def test_a_routing_file_refused_for_the_fleet_is_tried_again_when_the_fleet_changes(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """A rule naming a pool the fleet did not have yet was refused, and stayed refused (its
    rule silently not applied) once the fleet gained the pool, until its bytes changed."""
    path = tmp_path / "fleet.yaml"
    urls = urls_of(emulated_fleet, "h100-fast", "a100-fast")
    path.write_text(fleet_text(urls))
    router = await make_router(load_fleet(path), ROUTING_ROUND_ROBIN, reload_interval_s=0.05)
    rule = "rules:\n  - when: {header: {x-tier: gold}}\n    then: {pool: {pool: premium}}\n"
    router.routing_path.write_text(ROUTING_ROUND_ROBIN + rule)
    deadline = time.monotonic() + 10.0
    while router.metric("kvroute_config_reloads_total", result="failure") < 1:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    rewrite(path, fleet_text(urls, **{"h100-fast": {"labels": {"pool": "premium"}}}))
    await reloads(router, "success", 1)
    while router.metric("kvroute_config_reloads_total", result="success") < 1:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            async with session.post(
                    f"{router.url}/v1/chat/completions", headers={"x-tier": "gold"},
                    json={"model": MODEL, "max_tokens": 2,
                          "messages": [{"role": "user", "content": "hi"}]}) as resp:
                assert resp.status == 200
                assert resp.headers["x-kvroute-worker"] == "h100-fast"


async def test_a_fleet_whose_apply_is_refused_is_not_in_force_and_is_tried_again(
        tmp_path: Path) -> None:
    """A routing file taken while the new servers were probed refused the fleet half-way:
    it was counted in force (the next reload measured its change from it) and a save did
    not try it again."""
    from policies.errors import RoutingConfigError
    from router.fleet_reloader import FleetReloader, PreparedFleet

    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text({"a": "http://127.0.0.1:1"}))
    first = load_fleet(path)
    outcomes: list[bool] = []
    applied: list[PreparedFleet] = []
    refuse = [True]

    async def apply(prepared: PreparedFleet) -> None:
        if refuse[0]:
            raise RoutingConfigError("rules[0].then.pool: no worker of the fleet has pool=x")
        applied.append(prepared)

    reloader = FleetReloader(path, first, {}, check=lambda fleet: None, environ={},
                             on_result=outcomes.append)
    reloader.start(apply)
    await reloader.stop()                      # polled by hand below
    rewrite(path, fleet_text({"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:2"}))
    assert not await reloader.check()          # read once: settling
    assert not await reloader.check()          # refused while applied
    assert outcomes == [False] and reloader.fleet is first
    refuse[0] = False
    before = path.stat().st_mtime_ns
    os.utime(path, ns=(before + 10**9, before + 10**9))     # saved again, unchanged
    assert await reloader.check()
    assert outcomes == [False, True] and [s.info.id for s in reloader.fleet.workers] == ["a", "b"]
    assert applied[0].change.added == ("b",)


async def test_the_fleet_taken_is_that_of_the_read_that_settled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file was hashed, then read again to be parsed: a write between the two (here a
    save cut short before its second worker, still a valid fleet) was taken without ever
    reading the same at two polls, and removed a worker until the next save."""
    from router.fleet_reloader import FleetReloader, PreparedFleet

    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text({"a": "http://127.0.0.1:1"}))
    applied: list[PreparedFleet] = []

    async def apply(prepared: PreparedFleet) -> None:
        applied.append(prepared)

    reloader = FleetReloader(path, load_fleet(path), {}, check=lambda fleet: None, environ={})
    reloader.start(apply)
    await reloader.stop()                      # polled by hand below
    rewrite(path, fleet_text({"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:2"}))
    assert not await reloader.check()          # read once: settling
    read_bytes, cut = Path.read_bytes, [False]

    def read_then_cut(self: Path) -> bytes:
        content = read_bytes(self)
        if self == path and not cut[0]:        # a save begins just after this read
            cut[0] = True
            path.write_text(fleet_text({"a": "http://127.0.0.1:1"}))
        return content

    monkeypatch.setattr(Path, "read_bytes", read_then_cut)
    assert await reloader.check()              # the same at two polls: taken
    assert cut[0]
    assert [s.info.id for s in reloader.fleet.workers] == ["a", "b"]
    assert applied[0].change.added == ("b",)


async def test_the_last_request_at_a_removed_worker_clears_it_even_a_transcription(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """A chat and a transcription in flight at a worker the fleet file removes: the chat
    ends first and leaves the worker to the transcription, whose end cleared nothing (the
    series the chat's end recorded stayed for the life of the process)."""
    chat_go, form_go, arrived = asyncio.Event(), asyncio.Event(), []

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        arrived.append(request.path)
        await (form_go if request.path.startswith("/v1/audio") else chat_go).wait()
        return web.json_response({"text": "hi", "usage": {"prompt_tokens": 1,
                                                          "completion_tokens": 1}})

    path = tmp_path / "fleet.yaml"
    backend = urls_of(emulated_fleet, "a100-fast")["a100-fast"]
    async with FrontedWorker(backend, answer) as worker, aiohttp.ClientSession() as session:
        path.write_text(fleet_text({"gone": worker.url}))
        router = await make_router(load_fleet(path), ROUTING_ROUND_ROBIN,
                                   reload_interval_s=0.05)
        form = aiohttp.FormData()
        form.add_field("file", b"RIFF0000", filename="a.wav", content_type="audio/wav")
        form.add_field("model", MODEL)
        transcription = asyncio.ensure_future(
            session.post(f"{router.url}/v1/audio/transcriptions", data=form))
        chat = asyncio.ensure_future(session.post(f"{router.url}/v1/chat/completions", json={
            "model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}))
        deadline = time.monotonic() + 10.0
        while len(arrived) < 2:
            assert time.monotonic() < deadline, arrived
            await asyncio.sleep(0.02)
        rewrite(path, fleet_text(urls_of(emulated_fleet, "h100-fast")))
        await reloads(router, "success", 1)
        chat_go.set()
        async with await chat as resp:
            assert resp.status == 200
        form_go.set()
        async with await transcription as resp:
            assert resp.status == 200
    assert worker_series(router, "gone") == []


async def test_an_emulated_worker_declared_anew_at_its_url_is_said_to_serve_as_it_started(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Under kvroute up, a worker's GPU changed at the same port was logged as down until
    something listens there, while the emulator started for its former declaration kept
    serving at that URL (estimated as the new GPU). The log says so now; a worker moved to
    another port is down there, as before."""
    from router.fleet_reloader import FleetReloader, PreparedFleet

    def emulated(**workers: dict[str, Any]) -> str:
        return yaml.safe_dump({
            "models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192}},
            "workers": [{"id": wid, "models": [MODEL], **fields}
                        for wid, fields in workers.items()]})

    path = tmp_path / "fleet.yaml"
    path.write_text(emulated(w=dict(gpu="a100", emulate={"port": 18999})))
    first = load_fleet(path)

    async def started(prepared: PreparedFleet) -> None:     # kvroute up's: starts the added
        pass

    async def apply(prepared: PreparedFleet) -> None:
        pass

    reloader = FleetReloader(path, first, {}, check=lambda fleet: None, environ={},
                             before_apply=started)
    reloader.start(apply)
    await reloader.stop()                      # polled by hand below
    with caplog.at_level(logging.WARNING, logger="router.fleet_reloader"):
        rewrite(path, emulated(w=dict(gpu="h100", emulate={"port": 18999})))
        assert not await reloader.check()      # settling
        assert await reloader.check()
    (said,) = [r.getMessage() for r in caplog.records]
    assert said == (
        f"worker w is declared anew in {path} (H100-80GB {MODEL}); kvroute up starts the "
        "emulated workers a reload adds, not those it changes: restart it. Until then the "
        f"emulator started as A100-80GB {MODEL} still serves at "
        "http://127.0.0.1:18999, estimated as the new one")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="router.fleet_reloader"):
        rewrite(path, emulated(w=dict(gpu="l40s", emulate={"port": 18999})))
        assert not await reloader.check()
        assert await reloader.check()
    (said,) = [r.getMessage() for r in caplog.records]     # what it started as, not was
    assert f"Until then the emulator started as A100-80GB {MODEL} still serves" in said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="router.fleet_reloader"):
        # declared back as its emulator was started: it serves as declared, no restart
        # (the log told the operator to restart, naming the declaration before)
        rewrite(path, emulated(w=dict(gpu="a100", emulate={"port": 18999})))
        assert not await reloader.check()
        assert await reloader.check()
    assert caplog.records == []
    with caplog.at_level(logging.WARNING, logger="router.fleet_reloader"):
        rewrite(path, emulated(w=dict(gpu="h100", emulate={"port": 18998})))
        assert not await reloader.check()
        assert await reloader.check()
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.endswith("Until something listens at http://127.0.0.1:18998 it is down")
    # a real server's entry turned emulate: at its URL: no emulator was started for it
    caplog.clear()
    rewrite(path, emulated(w=dict(gpu="h100", url="http://127.0.0.1:18997")))
    assert not await reloader.check()
    assert await reloader.check()
    with caplog.at_level(logging.WARNING, logger="router.fleet_reloader"):
        rewrite(path, emulated(w=dict(gpu="a100", emulate={"port": 18997})))
        assert not await reloader.check()
        assert await reloader.check()
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.endswith("Until something listens at http://127.0.0.1:18997 it is down")
