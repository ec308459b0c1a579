"""The open-file limit: raised to the hard limit at start, and what that buys through a live
``kvroute up`` started with a low one."""

from __future__ import annotations

import asyncio
import collections
import logging
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from router.fd_limit import raise_open_file_limit
from tests.router.gateway_support import FAST, MODEL, REPO_ROOT, fleet_data, wait_healthy
from workers.ports import free_port


@pytest.fixture
def low_soft_limit() -> Iterator[int]:
    """This process's soft limit lowered to 256 for the test, then put back."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard open-file limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        yield hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_soft_limit_is_raised_to_the_hard_one(low_soft_limit: int,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    hard = low_soft_limit
    expected = 1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)
    with caplog.at_level(logging.INFO, logger="router.fd_limit"):
        assert raise_open_file_limit() == expected
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (expected, hard)
    assert "raised from 256" in caplog.text


def test_the_cap_bounds_it_and_a_higher_soft_limit_is_kept(low_soft_limit: int) -> None:
    assert raise_open_file_limit(cap=300) == 300
    assert raise_open_file_limit(cap=280) == 300          # never lowered
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 300


def _limits(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-file limit in /proc")


@pytest.mark.integration
def test_kvroute_up_started_with_a_low_limit_serves_more_streams_than_it(
        tmp_path: Path) -> None:
    """Started with a soft limit of 256 files, ``kvroute up`` (router and workers) serves
    300 concurrent streams: 600 sockets in the router alone. Without the raise every one of
    them failed (accept and connect: EMFILE)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard open-file limit is {hard}")
    ports = {"h100-0": free_port(), "a100-0": free_port()}
    fleet = tmp_path / "fleet.yaml"
    real_time = {**FAST, "time_scale": 1.0}       # the streams overlap
    fleet.write_text(yaml.safe_dump(fleet_data(
        {"h100-0": ("h100", real_time), "a100-0": ("a100", real_time)}, ports)))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "router.cli", "up", "--fleet", str(fleet), "--routing",
         str(REPO_ROOT / "config/routing.yaml"), "--port", str(port)],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)))
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        assert _limits(proc.pid) > 256
        statuses = asyncio.run(_streams(f"http://127.0.0.1:{port}/v1/chat/completions", 300))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert statuses == collections.Counter({200: 300})


async def _streams(url: str, count: int) -> collections.Counter[object]:
    body = {"model": MODEL, "stream": True, "max_tokens": 8,
            "messages": [{"role": "user", "content": "Tell me a story."}]}

    async def one(session: aiohttp.ClientSession) -> object:
        try:
            async with session.post(url, json=body) as resp:
                await resp.read()
                return resp.status
        except aiohttp.ClientError as exc:
            return type(exc).__name__

    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=timeout) as session:
        return collections.Counter(await asyncio.gather(*(one(session) for _ in range(count))))
