"""``kvroute serve --processes N``: N router processes share one port and stop together."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import openai
import pytest

from tests.router.gateway_support import MODEL, REPO_ROOT, url_fleet_file
from workers.emulator.process import EmulatorProcess
from workers.ports import free_port

pytestmark = pytest.mark.integration


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _wait_healthy(urls: list[str], proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """Until each of ``urls`` answers /health; fails if ``proc`` exits first."""
    deadline = time.monotonic() + timeout_s
    for url in urls:
        while True:
            assert proc.poll() is None and time.monotonic() < deadline
            try:
                urllib.request.urlopen(f"{url}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)


def _kill_if_running(proc: subprocess.Popen[bytes]) -> None:
    """After a failed check: no router process outlives the test."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_processes_share_the_port_and_stop_together(tmp_path: Path) -> None:
    with EmulatorProcess(gpu="h100", time_scale=0.01, served_model_names=[MODEL]) as worker:
        fleet = url_fleet_file(tmp_path, {"w0": worker.url})
        port = free_port()
        log = (tmp_path / "serve.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "router.cli", "serve", "--fleet", str(fleet), "--routing",
             str(REPO_ROOT / "config/routing.yaml"), "--port", str(port), "--processes", "2"],
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=log)
        try:
            _wait_healthy([f"http://127.0.0.1:{port}"], proc)
            children = _children(proc.pid)
            assert len(children) >= 1
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
            for _ in range(6):
                reply = client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
                assert reply.usage is not None and reply.usage.completion_tokens == 2
            os.kill(proc.pid, signal.SIGINT)
            assert proc.wait(timeout=20) == 0
        finally:
            _kill_if_running(proc)
            log.close()
        # without shared state, the operator is told what it costs
        assert "2 processes without --redis-url" in (tmp_path / "serve.log").read_text()
        deadline = time.monotonic() + 5       # the spawn resource tracker exits on its own
        while any(Path(f"/proc/{c}").exists() for c in children):
            assert time.monotonic() < deadline, [
                (Path(f"/proc/{c}/cmdline").read_bytes()) for c in children
                if Path(f"/proc/{c}").exists()]
            time.sleep(0.05)
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _requests_answered(url: str) -> float:
    """The sum of kvroute_requests_total in ``url``'s /metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("kvroute_requests_total{"))


def test_each_process_answers_for_its_own_metrics_on_a_port_of_its_own(tmp_path: Path) -> None:
    with EmulatorProcess(gpu="h100", time_scale=0.01, served_model_names=[MODEL]) as worker:
        fleet = url_fleet_file(tmp_path, {"w0": worker.url})
        port = free_port()
        metrics_port = free_port()
        while not _bindable(metrics_port + 1) or metrics_port + 1 == port:
            metrics_port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "router.cli", "serve", "--fleet", str(fleet), "--routing",
             str(REPO_ROOT / "config/routing.yaml"), "--port", str(port), "--processes", "2",
             "--metrics-port", str(metrics_port)],
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        own = [f"http://127.0.0.1:{metrics_port + i}" for i in range(2)]
        try:
            _wait_healthy([f"http://127.0.0.1:{port}", *own], proc)
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                                   max_retries=0)
            for _ in range(12):
                client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
            # each port answers for one process, the same on every scrape; together, all (a
            # request is counted as its answer ends: the last may lag the client a moment)
            settled = time.monotonic() + 5
            while sum(by_process := [_requests_answered(url) for url in own]) < 12:
                assert time.monotonic() < settled, by_process
                time.sleep(0.05)
            assert sum(by_process) == 12
            assert [_requests_answered(url) for url in own] == by_process
            os.kill(proc.pid, signal.SIGINT)
            assert proc.wait(timeout=20) == 0
        finally:
            _kill_if_running(proc)


@pytest.mark.parametrize(("args", "message"), [
    (["--metrics-port", "65535", "--processes", "2"],
     "--metrics-port: 2 processes need ports 65535..65536, past 65535"),
    (["--metrics-port", "0"], "process_port: must be within 1..65535"),
])
def test_a_metrics_port_out_of_range_exits_2_with_the_reason(
        args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from router.cli import main
    assert main(["serve", "--fleet", str(REPO_ROOT / "config/fleet.yaml"), *args]) == 2
    assert message in capsys.readouterr().err
