"""EmulatorProcess and EmulatorFleet: start on loopback, wait for health, stop by pid."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.workers.proxy_support import set_dead_proxy
from workers.emulator.process import EmulatorFleet, EmulatorProcess, EmulatorStartError
from workers.ports import free_port

pytestmark = pytest.mark.integration


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def refused(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/health", timeout=2)
    except urllib.error.URLError:
        return True
    return False


def write_fleet(tmp_path: Path, with_refusing_worker: bool) -> tuple[Path, list[int]]:
    ports = [free_port(), free_port(), free_port()]
    fleet = {
        "gpu_classes": {"h200": {"memory_gb": 141, "tflops_bf16": 989.4, "bandwidth_gbps": 4800,
                                 "price_per_hour": 4.5}},
        "models": {"org/model-a": {"arch": "llama-3-8b", "max_model_len": 2048}},
        "workers": [
            {"id": "w-h200", "gpu": "h200", "models": ["org/model-a"],
             "emulate": {"port": ports[0], "num_gpu_blocks": 500}},
            {"id": "w-l40s", "gpu": "l40s", "models": ["org/model-a"],
             "emulate": {"port": ports[1]}},
            *([{"id": "w-down", "gpu": "a100", "models": ["org/model-a"],
                "emulate": {"port": ports[2], "faults": {"refuse_connections": True}}}]
              if with_refusing_worker else []),
            {"id": "remote", "gpu": "a100", "models": ["org/model-a"],
             "url": "http://10.0.0.9:8000"},
        ]}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    return path, ports


@pytest.mark.parametrize("one_process", [True, False])
def test_fleet_hosts_every_emulated_worker(tmp_path: Path, one_process: bool) -> None:
    # One process: also a worker configured to refuse connections (not waited for).
    path, ports = write_fleet(tmp_path, with_refusing_worker=one_process)
    with EmulatorFleet(path, time_scale=0.0, one_process=one_process) as fleet:
        expected = {"w-h200": f"http://127.0.0.1:{ports[0]}",
                    "w-l40s": f"http://127.0.0.1:{ports[1]}"}
        if one_process:
            expected["w-down"] = f"http://127.0.0.1:{ports[2]}"
            assert refused(fleet.urls["w-down"])
        assert fleet.urls == expected
        assert len(fleet.pids) == (1 if one_process else 2)
        for url in (fleet.urls["w-h200"], fleet.urls["w-l40s"]):
            models = get_json(f"{url}/v1/models")
            assert isinstance(models, dict)
            assert [(m["id"], m["max_model_len"]) for m in models["data"]] == \
                [("org/model-a", 2048)]
        with urllib.request.urlopen(f"{fleet.urls['w-h200']}/metrics", timeout=5) as resp:
            assert 'num_gpu_blocks="500"' in resp.read().decode()
    assert all(refused(url) for url in fleet.urls.values())


def test_the_readiness_probe_ignores_http_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under HTTP_PROXY with no NO_PROXY the probe went to the proxy: 'emulator not healthy
    after 30s' with an empty reason, for an emulator that was up."""
    set_dead_proxy(monkeypatch)
    with EmulatorProcess(time_scale=0.0, ready_timeout_s=10.0) as worker:
        assert worker.url.startswith("http://127.0.0.1:")


def test_process_stops_by_pid_and_reports_start_errors() -> None:
    proc = EmulatorProcess(time_scale=0.0).start()
    try:
        assert get_json(f"{proc.url}/version") == {"version": "0.33.0"}
        assert proc.pid is not None
    finally:
        proc.stop()
    assert refused(proc.url)
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
    with pytest.raises(EmulatorStartError, match=r"emulate: unknown key\(s\): bogus"):
        EmulatorProcess(emulate={"bogus": 1}).start()


@pytest.mark.parametrize("one_process", [True, False])
def test_a_port_another_server_answers_on_is_not_taken_for_the_worker(
        tmp_path: Path, one_process: bool) -> None:
    """Another emulator holds a worker's port and answers its /health: that is not the
    worker started here (its process could not listen and exited), so the start fails."""
    path, ports = write_fleet(tmp_path, with_refusing_worker=False)
    with EmulatorProcess(port=ports[0], time_scale=0.0) as other:
        fleet = EmulatorFleet(path, time_scale=0.0, one_process=one_process,
                              ready_timeout_s=20.0)
        try:
            with pytest.raises(EmulatorStartError, match=r"cannot listen: worker 'w-h200' at "
                                                         r"127\.0\.0\.1:\d+: Address already "
                                                         "in use"):
                fleet.start()
        finally:
            fleet.stop()
        assert get_json(f"{other.url}/version") == {"version": "0.33.0"}   # untouched
    assert all(refused(f"http://127.0.0.1:{port}") for port in ports[:2])


def test_relative_paths_in_the_fleet_are_read_from_the_callers_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ``kvroute emulate`` reads them there; ``kvroute up`` ran its emulators elsewhere.
    from tests.workers.tls_support import make_tls_files

    (tmp_path / "certs").mkdir()
    make_tls_files(tmp_path / "certs")
    port = free_port()
    fleet = {"models": {"org/model-a": {"arch": "llama-3-8b", "max_model_len": 2048}},
             "workers": [{"id": "w0", "gpu": "h100", "models": ["org/model-a"],
                          "emulate": {"port": port, "ssl_certfile": "certs/cert.pem",
                                      "ssl_keyfile": "certs/key.pem"}}]}
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    # a module of the caller's named like the package must not shadow it (python -P)
    (tmp_path / "workers.py").write_text("raise SystemExit('the caller workers.py')\n")
    monkeypatch.chdir(tmp_path)
    with EmulatorFleet(Path("fleet.yaml"), time_scale=0.0) as emulators:
        assert emulators.urls == {"w0": f"https://127.0.0.1:{port}"}


def test_a_hangup_stops_the_emulator_as_sigterm_does() -> None:
    """A closed terminal sends SIGHUP to `kvroute up`'s whole group: the emulators ended at
    once (status -1), cutting the streams the router was draining."""
    import signal

    process = EmulatorProcess(gpu="h100", time_scale=0.0).start()
    try:
        assert process.pid is not None
        os.kill(process.pid, signal.SIGHUP)
        assert process._child.proc is not None
        assert process._child.proc.wait(timeout=15) == 0
    finally:
        process.stop()


def test_a_worker_refusing_connections_says_so_in_its_ready_line(tmp_path: Path) -> None:
    """Its line read as any other's: a script waiting for it took a worker that never
    listens for one that answers."""
    import selectors
    import signal
    import subprocess
    import sys
    import time

    path, ports = write_fleet(tmp_path, with_refusing_worker=True)
    proc = subprocess.Popen([sys.executable, "-m", "router.cli", "emulate", "--fleet", str(path),
                             "--time-scale", "0"], stderr=subprocess.PIPE)
    text = ""
    try:
        assert proc.stderr is not None
        selector = selectors.DefaultSelector()
        selector.register(proc.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + 30
        while text.count("emulator ready") < 3:
            assert time.monotonic() < deadline, text
            if selector.select(timeout=1.0):
                text += os.read(proc.stderr.fileno(), 65536).decode()
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()
    lines = text.splitlines()
    ready = {line.split()[2]: line for line in lines if "emulator ready" in line}
    assert ready["w-down"].rstrip().endswith(
        "(refusing connections: faults.refuse_connections)")
    assert f"http://127.0.0.1:{ports[2]} " in ready["w-down"]
    assert "refusing" not in ready["w-h200"] and "refusing" not in ready["w-l40s"]


def test_workers_added_to_the_file_start_in_processes_of_their_own(tmp_path: Path) -> None:
    """kvroute up's reload hook: an added worker starts (an empty ``faults:`` raised); one
    renamed at a URL an added worker had frees it; one the shared process hosts does not."""
    from workers.fleet import load_fleet

    path, ports = write_fleet(tmp_path, with_refusing_worker=False)
    with EmulatorFleet(path, time_scale=0.0, one_process=True) as fleet:
        data = yaml.safe_load(path.read_text())
        port = free_port()
        data["workers"].append({"id": "added", "gpu": "l40s", "models": ["org/model-a"],
                                "emulate": {"port": port, "faults": None}})
        path.write_text(yaml.safe_dump(data))
        assert fleet.add(load_fleet(path).worker("added"))
        assert get_json(f"http://127.0.0.1:{port}/v1/models")
        assert not fleet.add(load_fleet(path).worker("added"))     # already served there
        data["workers"][-1]["id"] = "renamed"
        path.write_text(yaml.safe_dump(data))
        assert fleet.add(load_fleet(path).worker("renamed"))       # the old process stopped
        assert fleet.urls["renamed"] == f"http://127.0.0.1:{port}" and "added" not in fleet.urls
        data["workers"][0]["id"] = "hosted-renamed"
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(EmulatorStartError, match="restart kvroute up"):
            fleet.add(load_fleet(path).worker("hosted-renamed"))
        assert len(fleet.pids) == 2
    assert refused(f"http://127.0.0.1:{port}") and refused(f"http://127.0.0.1:{ports[0]}")


def test_an_emulator_stops_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    """SIGKILL (or the OOM killer) of `kvroute up` left its emulators serving their ports:
    the next `kvroute up` failed with "address already in use"."""
    import signal
    import subprocess
    import sys
    import time

    from tests.router.gateway_support import REPO_ROOT

    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import time\n"
         "from workers.emulator.process import EmulatorProcess\n"
         "emulator = EmulatorProcess(time_scale=0.0).start()\n"
         "print(emulator.pid, emulator.url, flush=True)\n"
         "time.sleep(120)\n"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    emulator_pid: int | None = None
    try:
        assert parent.stdout is not None
        pid_text, url = parent.stdout.readline().split()
        emulator_pid = int(pid_text)
        assert get_json(f"{url}/v1/models")
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while running(emulator_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not running(emulator_pid)
        assert refused(url)
        emulator_pid = None
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if emulator_pid is not None and running(emulator_pid):
            os.kill(emulator_pid, signal.SIGKILL)


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (an exited one waiting for init to reap it, whose
    parent was killed, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
