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


def _serve_two(tmp_path: Path, worker_url: str, port: int) -> subprocess.Popen[bytes]:
    fleet = url_fleet_file(tmp_path, {"w0": worker_url})
    return subprocess.Popen(
        [sys.executable, "-m", "router.cli", "serve", "--fleet", str(fleet), "--routing",
         str(REPO_ROOT / "config/routing.yaml"), "--port", str(port), "--processes", "2"],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=(tmp_path / "serve.log").open("wb"))


def _router_children(pid: int) -> list[int]:
    """The spawned router processes (not the spawn resource tracker)."""
    return [c for c in _children(pid)
            if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def test_a_child_that_dies_stops_the_service_with_status_1(tmp_path: Path) -> None:
    """A killed child was noticed by nothing: no log line, the service ran on one process
    short and exited 0 at its next stop."""
    with EmulatorProcess(gpu="h100", time_scale=0.01, served_model_names=[MODEL]) as worker:
        port = free_port()
        proc = _serve_two(tmp_path, worker.url, port)
        try:
            _wait_healthy([f"http://127.0.0.1:{port}"], proc)
            [child] = _router_children(proc.pid)
            os.kill(child, signal.SIGKILL)
            assert proc.wait(timeout=30) == 1
        finally:
            _kill_if_running(proc)
    logged = (tmp_path / "serve.log").read_text()
    host = socket.gethostname()       # (the default --replica-id)
    assert (f"ERROR [{host}-0] router.app: stopping: router process {host}-1 (pid "
            f"{child}) exited with status -9") in logged      # each process's lines name it


def test_children_stop_when_their_parent_is_killed(tmp_path: Path) -> None:
    """After a SIGKILL of the parent its children kept the port and answered on it, and a
    restart found the port taken."""
    with EmulatorProcess(gpu="h100", time_scale=0.01, served_model_names=[MODEL]) as worker:
        port = free_port()
        proc = _serve_two(tmp_path, worker.url, port)
        children: list[int] = []
        try:
            _wait_healthy([f"http://127.0.0.1:{port}"], proc)
            children = _router_children(proc.pid)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            deadline = time.monotonic() + 30
            while any(Path(f"/proc/{c}").exists() and Path(f"/proc/{c}/stat").read_text()
                      .rsplit(")", 1)[1].split()[0] != "Z" for c in children):
                assert time.monotonic() < deadline, "a child outlived its parent"
                time.sleep(0.1)
        finally:
            for child in children:
                if Path(f"/proc/{child}").exists():
                    os.kill(child, signal.SIGKILL)
        with socket.socket() as sock:                  # nothing listens there any more
            assert sock.connect_ex(("127.0.0.1", port)) != 0
    assert "the parent router process" in (tmp_path / "serve.log").read_text()


def test_a_taken_process_port_is_refused_before_any_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A child that could not listen on its metrics port died alone (the service ran on,
    one process short), and ports overlapping the service's were not checked."""
    from router.cli import main
    port = free_port()
    # the second process's port taken, the first's free: a free port outside the kernel's
    # ephemeral range (where other tests' connections take theirs) and the one after it
    for _ in range(100):
        base = free_port()
        taken = socket.socket()
        try:
            taken.bind(("127.0.0.1", base + 1))
        except OSError:
            taken.close()
            continue
        break
    with taken:
        taken.listen()
        assert main(["serve", "--fleet", str(REPO_ROOT / "config/fleet.yaml"), "--port",
                     str(port), "--processes", "2", "--metrics-port", str(base)]) == 2
    assert f"--metrics-port: cannot listen on 127.0.0.1:{base + 1}" in capsys.readouterr().err
    assert main(["serve", "--fleet", str(REPO_ROOT / "config/fleet.yaml"), "--port", str(port),
                 "--processes", "3", "--metrics-port", str(port - 1)]) == 2
    assert (f"--metrics-port: the 3 processes' ports {port - 1}..{port + 1} include the "
            f"service's port {port}") in capsys.readouterr().err
    assert main(["serve", "--fleet", str(REPO_ROOT / "config/fleet.yaml"),
                 "--processes", "0"]) == 2
    assert "--processes: must be at least 1, got 0" in capsys.readouterr().err
