"""Shared pieces of the router integration tests: the emulated worker zoo, fleet builders and
the handle of a running router (fixtures live in ``conftest.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml
from aiohttp import web

from router.keys import METRICS
from workers.fleet import FleetConfig, parse_fleet

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
FAST = {"time_scale": 0.01, "output_len": {"dist": "fixed", "value": 4096}}

# worker id -> (gpu, emulate block without port)
WORKERS: dict[str, tuple[str, dict[str, Any]]] = {
    "h100-fast": ("h100", FAST),
    "a100-fast": ("a100", FAST),
    "failing": ("a100", {**FAST, "faults": {"error_rate": 1.0}}),
    "garbage": ("l40s", {**FAST, "faults": {"metrics_broken": "garbage"}}),
    "slow": ("l40s", {"time_scale": 1.0, "output_len": {"dist": "fixed", "value": 4096}}),
    "stall": ("h100", {**FAST, "faults": {"stall_after_tokens": 3}}),
    "erring": ("l40s", {**FAST, "faults": {"error_after_tokens": 2}}),
}

ROUTING_ROUND_ROBIN = """\
profiles:
  default:
    filters: [{type: model}, {type: healthy}]
    picker: {type: round-robin}
default_profile: default
"""


def fleet_data(workers: Mapping[str, tuple[str, Mapping[str, Any]]],
               ports: Mapping[str, int]) -> dict[str, Any]:
    return {
        "models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192}},
        "workers": [{"id": wid, "gpu": gpu, "models": [MODEL],
                     "emulate": {**emulate, "port": ports[wid]}}
                    for wid, (gpu, emulate) in workers.items()],
    }


def subset(fleet: FleetConfig, ids: list[str]) -> FleetConfig:
    by_id = {w.info.id: w for w in fleet.workers}
    return dataclasses.replace(fleet, workers=tuple(by_id[i] for i in ids))


def url_fleet_data(urls: Mapping[str, str]) -> dict[str, Any]:
    """The fleet file's data of H100 workers reached by URL (not started by the file)."""
    return {"models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192}},
            "workers": [{"id": wid, "gpu": "h100", "models": [MODEL], "url": url}
                        for wid, url in urls.items()]}


def url_fleet(urls: Mapping[str, str]) -> FleetConfig:
    """A fleet of workers reached by URL (not started by the fleet file)."""
    return parse_fleet(url_fleet_data(urls))


def url_fleet_file(folder: Path, urls: Mapping[str, str]) -> Path:
    """``url_fleet``'s fleet as ``folder/fleet.yaml``, for a router in its own process."""
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(url_fleet_data(urls)))
    return path


# the samples a family of each type exports, by the suffix after its name
SAMPLE_SUFFIXES: Mapping[str, tuple[str, ...]] = {
    "counter": ("_total", "_created"), "gauge": ("",),
    "summary": ("", "_count", "_sum", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"), "info": ("_info",),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"), "stateset": ("",), "unknown": ("",)}


@dataclass
class RouterHandle:
    app: web.Application
    port: int
    routing_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples ``name`` whose labels include ``labels`` (0 when none
        does): a label left out is summed over, as ``sum without`` would. A name the
        registry does not export, or a label its samples do not carry, raises ``KeyError``:
        a misspelt one read as 0, and an assertion ``== 0`` on it could not fail."""
        wanted = labels.items()
        total = 0.0
        known = False
        carried: set[str] = set()       # the label names of the family's samples
        sampled = False
        for family in self.app[METRICS].registry.collect():
            exported = {family.name + suffix
                        for suffix in SAMPLE_SUFFIXES.get(family.type, ("",))}
            if name not in exported and all(s.name != name for s in family.samples):
                continue
            known = True
            for sample in family.samples:
                sampled = True
                carried.update(sample.labels)
                if sample.name == name and wanted <= sample.labels.items():
                    total += sample.value
        if not known:
            raise KeyError(f"the router exports no metric {name!r}")
        if sampled and not labels.keys() <= carried:
            raise KeyError(f"{name} has no label {sorted(labels.keys() - carried)} "
                           f"(its labels: {sorted(carried)})")
        return total


RouterFactory = Callable[..., Awaitable[RouterHandle]]


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """Poll ``url``/health until it answers 200; fail if ``proc`` (a ``kvroute up``) exits
    first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "kvroute up exited early"
        try:
            with urllib.request.urlopen(url + "/health", timeout=1.0) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("router never became healthy")


async def short_chat(session: aiohttp.ClientSession, router: RouterHandle,
                     max_tokens: int = 2) -> tuple[int, str]:
    """One short chat completion through ``router``: its status and the worker it went to."""
    async with session.post(f"{router.url}/v1/chat/completions", json={
            "model": MODEL, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "hi"}]}) as resp:
        await resp.read()
        return resp.status, resp.headers["x-kvroute-worker"]


async def fleet_entry(router: RouterHandle, worker: str) -> dict[str, Any]:
    """``worker``'s entry of the router's ``/debug/fleet``."""
    async with aiohttp.ClientSession() as session, session.get(
            f"{router.url}/debug/fleet") as resp:
        data: list[dict[str, Any]] = (await resp.json())["data"]
    return next(w for w in data if w["id"] == worker)


PostHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FrontedWorker:
    """A worker the test scripts, in front of an emulated one (``backend``): the router's
    polls (every GET) pass through to it, and each request it is sent (POST) is answered by
    ``on_post``. Served on 127.0.0.1 while the ``async with`` lasts."""

    def __init__(self, backend: str, on_post: PostHandler) -> None:
        self.backend = backend
        self._on_post = on_post
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    async def __aenter__(self) -> FrontedWorker:
        from workers.ports import free_port

        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._poll)
        app.router.add_route("POST", "/{tail:.*}", self._on_post)
        self._session = aiohttp.ClientSession()
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None and self._session is not None
        await self._runner.cleanup()
        await self._session.close()

    async def _poll(self, request: web.Request) -> web.Response:
        assert self._session is not None
        async with self._session.get(self.backend + request.path_qs) as answer:
            return web.Response(body=await answer.read(), status=answer.status,
                                content_type=answer.content_type)


@contextlib.asynccontextmanager
async def scripted_router(emulated_fleet: FleetConfig, make_router: RouterFactory,
                          on_post: PostHandler, worker_id: str = "w",
                          routing: str = ROUTING_ROUND_ROBIN,
                          **settings: Any) -> AsyncIterator[RouterHandle]:
    """A router (round-robin unless ``routing`` says otherwise) in front of one
    ``FrontedWorker`` (``worker_id``) whose requests ``on_post`` answers, its polls passed
    to the session's emulated ``h100-fast``."""
    backend = subset(emulated_fleet, ["h100-fast"]).workers[0].info.url
    async with FrontedWorker(backend, on_post) as worker:
        yield await make_router(url_fleet({worker_id: worker.url}), routing, **settings)



# whether a request's body asks for a stream
StreamAsked = Callable[[web.Request, bytes], Awaitable[bool]]


class IdsRunningLate:
    """A worker that keys its requests by ``X-Request-Id``, refuses an id it runs (vLLM's
    400 "already running"), and notices a stream's client gone ``notice_s`` later (vLLM
    aborts at its next engine step, later under load). A stream is 200 events of ``chunk``;
    an answer that is not streamed is ``whole``."""

    def __init__(self, stream_asked: StreamAsked, chunk: Mapping[str, Any],
                 whole: Mapping[str, Any], notice_s: float = 0.5) -> None:
        self._stream_asked = stream_asked
        self._chunk = orjson.dumps(chunk)
        self._whole = whole
        self.notice_s = notice_s
        self.running: set[str] = set()
        self.refused = 0

    async def answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        request_id = request.headers["X-Request-Id"]
        if request_id in self.running:
            self.refused += 1
            return web.json_response({"object": "error", "type": "BadRequestError",
                                      "message": f"Request id {request_id} already running.",
                                      "code": 400}, status=400)
        if not await self._stream_asked(request, body):
            return web.json_response(self._whole)
        self.running.add(request_id)
        try:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for _ in range(200):
                await response.write(b"data: " + self._chunk + b"\n\n")
                await asyncio.sleep(0.01)
            await response.write(b"data: [DONE]\n\n")
            self.running.discard(request_id)
            return response
        finally:
            if request_id in self.running:         # its client left: noticed later
                asyncio.get_running_loop().call_later(
                    self.notice_s, self.running.discard, request_id)
