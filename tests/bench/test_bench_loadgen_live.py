"""The load generator and the CPU accounting against a real zero-latency emulated worker."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.backends import chat_body
from bench.launch import Launched
from bench.loadgen import LoadSpec, run_load
from bench.overhead import run_load_process
from bench.proc_stats import cpu_seconds
from bench.targets import url_fleet_text
from workers.emulator.process import EmulatorProcess
from workers.ports import free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker() -> EmulatorProcess:
    with EmulatorProcess(model="llama-3.1-8b", time_scale=0.0, served_model_names=["bench-model"],
                         extra_args=["--output-len", "fixed:16"]) as emulator:
        yield emulator


async def test_closed_loop_is_bounded_by_max_requests(worker: EmulatorProcess) -> None:
    spec = LoadSpec(url=f"{worker.url}/v1/chat/completions", body=chat_body(),
                    concurrency=4, duration_s=10.0, max_requests=40)
    result = await run_load(spec)
    assert (result.completed, result.errors) == (40, 0)
    assert result.latency_p50_ms is not None and result.ttfc_p50_ms is None


async def test_streams_complete_with_every_chunk(worker: EmulatorProcess) -> None:
    spec = LoadSpec(url=f"{worker.url}/v1/chat/completions", body=chat_body(stream=True),
                    stream=True, concurrency=2, duration_s=10.0, max_requests=10)
    result = await run_load(spec)
    assert (result.completed, result.errors) == (10, 0)
    assert result.mean_events == 18.0       # role chunk + 16 tokens + [DONE]
    assert result.ttfc_p50_ms is not None and result.ttfc_p50_ms <= result.latency_p50_ms


async def test_open_loop_sends_bounded_requests_and_errors_are_counted(
        worker: EmulatorProcess) -> None:
    spec = LoadSpec(url=f"{worker.url}/v1/chat/completions", body={"model": "bench-model"},
                    mode="open", rate=200.0, duration_s=5.0, max_requests=15)
    result = await run_load(spec)
    assert (result.completed, result.errors) == (0, 15)      # no messages: 400 each
    assert result.first_error == "HTTP 400"


def test_router_cpu_is_charged_per_request(worker: EmulatorProcess, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(url_fleet_text([worker.url]))
    routing = Path(__file__).resolve().parents[2] / "config" / "policies" / "round-robin.yaml"
    port = free_port()
    router = Launched("kvroute", [sys.executable, "-m", "router.cli", "serve", "--fleet",
                                  str(fleet), "--routing", str(routing), "--port", str(port),
                                  "--log-level", "WARNING"], tmp_path / "router.log")
    with router:
        router.wait_http(f"http://127.0.0.1:{port}/health", timeout_s=30)
        before = cpu_seconds(router.pid)
        spec = LoadSpec(url=f"http://127.0.0.1:{port}/v1/chat/completions", body=chat_body(),
                        concurrency=4, duration_s=10.0, max_requests=60)
        result = run_load_process(spec, tmp_path, cpus=None)
        used = cpu_seconds(router.pid) - before
    assert (result.completed, result.errors) == (60, 0)
    assert used > 0.0          # the router's own process tree did the proxying work
