"""Router integration fixtures: one emulator process hosting workers with different
behaviours (session-wide), a factory of in-process routers over any subset of them, and a
real ``redis-server`` on 127.0.0.1 (free port) started for a test and stopped by pid."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from bench.redis_server import start_redis
from router.app import start_router
from router.settings import Settings
from tests.router.gateway_support import (
    REPO_ROOT,
    WORKERS,
    RouterFactory,
    RouterHandle,
    fleet_data,
)
from workers.emulator.process import EmulatorFleet
from workers.fleet import FleetConfig, load_fleet
from workers.ports import free_port, free_ports

EMBEDDINGS_EXAMPLE = REPO_ROOT / "config/examples/embeddings-fleet.yaml"


@pytest.fixture(scope="session")
def emulated_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    path = tmp_path_factory.mktemp("fleet") / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet_data(WORKERS, dict(zip(
        WORKERS, free_ports(len(WORKERS)), strict=True)))))
    fleet = load_fleet(path)
    with EmulatorFleet(fleet, one_process=True):
        yield fleet


@pytest.fixture(scope="module")
def embeddings_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    """The example fleet of two generative and two pooling (embedding) workers, on free
    ports, emulated in one process (for one test module)."""
    data = yaml.safe_load(EMBEDDINGS_EXAMPLE.read_text())
    fast = {"time_scale": 0.01, "output_len": {"dist": "fixed", "value": 8}}
    for worker in data["workers"]:
        worker["emulate"] = {**worker["emulate"], **fast, "port": free_port()}
    path: Path = tmp_path_factory.mktemp("embeddings") / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    loaded = load_fleet(path)
    with EmulatorFleet(loaded, one_process=True):
        yield loaded


@pytest.fixture
async def make_router(tmp_path: Path) -> AsyncIterator[RouterFactory]:
    runners: list[web.AppRunner] = []

    async def make(fleet: FleetConfig, routing: str | None = None,
                   **overrides: Any) -> RouterHandle:
        routing_path = tmp_path / f"routing-{len(runners)}.yaml"
        if routing is None:
            routing_path.write_text((REPO_ROOT / "config/routing.yaml").read_text())
        else:
            routing_path.write_text(routing)
        options: dict[str, Any] = {"scrape_interval_s": 0.05, "port": 0, **overrides}
        settings = Settings(fleet_path=Path(fleet.source), routing_path=routing_path, **options)
        runner, port = await start_router(settings, fleet)
        runners.append(runner)
        return RouterHandle(runner.app, port, routing_path)

    yield make
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
def redis_url(tmp_path: object) -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make test installs it)")
    proc, port = start_redis(binary)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
