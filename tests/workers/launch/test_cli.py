"""``kvroute launch-vllm``: dry run prints each worker's command; bad input exits 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from router.cli import main
from workers.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[3]

FLEET = """
models: {tiny: {arch: llama-3-8b, max_model_len: 2048}}
workers:
  - {id: real-0, gpu: a100, models: [tiny], url: "http://127.0.0.1:9101",
     launch: {model: /m, python: /py}}
  - {id: other, gpu: h100, models: [tiny], url: "http://10.0.0.2:8000"}
  - {id: emu, gpu: l40s, models: [tiny], emulate: {port: 9103}}
"""


def test_dry_run_prints_launchable_workers(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    assert main(["launch-vllm", "--fleet", str(fleet), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "# real-0 -> http://127.0.0.1:9101"
    assert out[1].startswith("/py -m vllm.entrypoints.openai.api_server --model /m ")
    assert len(out) == 2


def test_worker_without_launch_block_exits_2(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    assert main(["launch-vllm", "--fleet", str(fleet), "--dry-run", "--worker", "other"]) == 2
    assert capsys.readouterr().err == ("kvroute launch-vllm: --worker: no launchable worker "
                                       "other (a real worker needs a launch: block)\n")


def test_unreadable_fleet_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch-vllm", "--fleet", str(tmp_path / "nope.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvroute launch-vllm: {tmp_path / 'nope.yaml'}: cannot read fleet "
                          "file") and err.count("\n") == 1


@pytest.mark.parametrize(("edit", "message"), [
    (("launch: {model: /m, python: /py}",
      "launch: {model: /m, python: /py, devices: [0]}, tensor_parallel: 2"),
     "workers[0].launch.devices: [0] is 1 GPU, but worker 'real-0' has tensor_parallel: 2, "
     "which needs 2 (one per rank) (line 5)"),
    (("python: /py}", "python: /py, max_model_len: -5}"),
     "workers[0].launch.max_model_len: must be a positive integer (line 5)"),
    (("python: /py}", "python: /py, enable_prefix_caching: false}, "
                      "kv_events: 'tcp://127.0.0.1:5557'"),
     "workers[real-0].kv_events: needs prefix caching"),     # found when building the command
    (("emulate: {port: 9103}", "emulate: {port: 99999}"),
     "workers[2].emulate.port: must be an integer within [1, 65535], got 99999 (line 7)"),
])
def test_bad_fleet_exits_2_with_one_line_naming_the_file(
        edit: tuple[str, str], message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET.replace(*edit))
    assert main(["launch-vllm", "--fleet", str(fleet), "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"kvroute launch-vllm: {fleet}: {message}\n"
    assert captured.out == ""


FAKE_VLLM = """#!{python}
# plays ``python -m vllm.entrypoints.openai.api_server ... --port P``: /health answers 200
# (or never, with KVROUTE_FAKE_SLOW set)
import http.server, os, sys, time
if os.environ.get("KVROUTE_FAKE_SLOW"):
    time.sleep(120)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
port = int(sys.argv[sys.argv.index("--port") + 1])
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _launcher(tmp_path: Path, slow: bool) -> subprocess.Popen[str]:
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_VLLM.format(python=sys.executable))
    fake.chmod(0o755)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"""
models: {{tiny: {{arch: llama-3-8b, max_model_len: 2048}}}}
workers:
  - {{id: real-0, gpu: a100, models: [tiny], url: "http://127.0.0.1:{free_port()}",
     launch: {{model: /m, python: {fake}, device: cpu}}}}
""")
    env = {**os.environ, **({"KVROUTE_FAKE_SLOW": "1"} if slow else {})}
    return subprocess.Popen([sys.executable, "-m", "router.cli", "launch-vllm", "--fleet",
                             str(fleet), "--log-dir", str(tmp_path / "logs")],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _server_pid(launcher: subprocess.Popen[str]) -> int:
    deadline = time.monotonic() + 20
    while True:
        children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
        if children:
            return int(children[0])
        assert time.monotonic() < deadline, "the launcher started no server"
        time.sleep(0.05)


def _stop(launcher: subprocess.Popen[str], servers: list[int]) -> None:
    """After a failed check: the launcher, then the servers it started (each in a session
    of its own, which its death would leave running), by pid."""
    if launcher.poll() is None:
        launcher.kill()
        launcher.wait()
    for pid in servers:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


@pytest.mark.integration
def test_a_server_that_ends_stops_the_launcher_with_its_log(tmp_path: Path) -> None:
    """It went on saying "1 vLLM server(s) healthy" over a dead server, so no supervisor
    restarted it."""
    launcher = _launcher(tmp_path, slow=False)
    servers: list[int] = []
    try:
        assert launcher.stdout is not None
        while "healthy" not in launcher.stdout.readline():
            assert launcher.poll() is None, launcher.communicate()
        servers.append(_server_pid(launcher))
        os.kill(servers[0], signal.SIGKILL)
        _, err = launcher.communicate(timeout=20)
    finally:
        _stop(launcher, servers)
    assert launcher.returncode == 1
    assert "kvroute launch-vllm: real-0: vLLM exited with code -9; stopping the others" in err


@pytest.mark.integration
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_the_servers_start_stops_them_at_once(tmp_path: Path,
                                                             stop: signal.Signals) -> None:
    """The launcher waited for /health until --timeout (900 s) whatever the signal; SIGHUP
    (a closed terminal) ended it at once and left the servers running."""
    launcher = _launcher(tmp_path, slow=True)
    servers: list[int] = []
    try:
        servers.append(_server_pid(launcher))
        time.sleep(0.5)
        launcher.send_signal(stop)
        _, err = launcher.communicate(timeout=30)
    finally:
        _stop(launcher, servers)
    assert launcher.returncode == 130
    assert err.strip().endswith("kvroute launch-vllm: stopped before every server was "
                                "healthy; every server stopped")
    assert _gone(servers[0])
