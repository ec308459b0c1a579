"""Starting, health-checking and stopping server processes by pid (a stand-in HTTP server
plays vLLM: the launcher only needs ``/health``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.workers.proxy_support import set_dead_proxy
from workers.launch.command import VllmCommand
from workers.launch.process import LaunchError, VllmFleet, VllmProcess, first_exception
from workers.ports import free_port

HEALTH_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
print("serving", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def command(worker_id: str, port: int, script: str = HEALTH_SERVER) -> VllmCommand:
    return VllmCommand(worker_id=worker_id, argv=(sys.executable, "-c", script, str(port)),
                       env={"KVROUTE_TEST": "1"}, url=f"http://127.0.0.1:{port}",
                       kv_events_endpoint=None)


@pytest.mark.integration
def test_fleet_starts_all_waits_for_health_and_stops_by_pid(tmp_path: Path) -> None:
    fleet = VllmFleet([command("a", free_port()), command("b", free_port())], tmp_path)
    with fleet:
        assert all(p.poll_healthy() for p in fleet.processes)
        pids = [p.pid for p in fleet.processes]
    assert all(pid is not None for pid in pids)
    assert [p.stop() for p in fleet.processes] == [-15, -15]      # ended by SIGTERM
    assert (tmp_path / "vllm-a.log").read_text() == "serving\n"


@pytest.mark.integration
def test_early_exit_is_reported_with_the_log(tmp_path: Path) -> None:
    process = VllmProcess(command("x", free_port(), "print('bad flag'); raise SystemExit(3)"),
                          tmp_path / "x.log")
    with process, pytest.raises(LaunchError, match=r"(?s)x: vLLM exited with code 3.*bad flag"):
        process.wait_healthy(timeout_s=30, poll_s=0.1)


@pytest.mark.integration
def test_not_healthy_in_time(tmp_path: Path) -> None:
    silent = "import time; time.sleep(60)"
    fleet = VllmFleet([command("slow", free_port(), silent)], tmp_path)
    with pytest.raises(LaunchError, match=r"not healthy after 0\.5 s: slow \(last probe of "
                                          r"http://127\.0\.0\.1:\d+/health: .*refused\)"):
        fleet.start(timeout_s=0.5)
    assert fleet.processes[0].stop() == -15                      # already stopped by start()


@pytest.mark.integration
def test_the_readiness_probe_ignores_http_proxy(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Under HTTP_PROXY with no NO_PROXY the probe went to the proxy, and a healthy server
    was never seen healthy."""
    set_dead_proxy(monkeypatch)
    process = VllmProcess(command("p", free_port()), tmp_path / "p.log")
    with process:
        process.wait_healthy(timeout_s=10, poll_s=0.1)
        assert process.last_probe_error is None


ENGINE_LOG = """\
(APIServer pid=1) WARNING [utils.py:255] this can cause `OSError: [Errno 24] Too many files`
(EngineCore pid=2) ERROR [core.py:1510] EngineCore failed to start.
(EngineCore pid=2) ERROR [core.py:1] zmq.error.ZMQError: Address already in use (addr='tcp://*:1')
(APIServer pid=1) ERROR [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: see above
""" + "\n".join(f"traceback line {i}" for i in range(40))


def test_first_exception_is_the_root_cause_not_a_warning_that_names_one() -> None:
    assert first_exception(ENGINE_LOG.splitlines()) == (
        "zmq.error.ZMQError: Address already in use (addr='tcp://*:1')")
    assert first_exception(["RuntimeError: boom", "ValueError: later"]) == "RuntimeError: boom"
    assert first_exception(["all fine", "no errors here"]) is None


@pytest.mark.integration
def test_early_exit_names_the_first_exception_even_beyond_the_tail(tmp_path: Path) -> None:
    script = f"print({ENGINE_LOG!r}); raise SystemExit(1)"
    process = VllmProcess(command("e", free_port(), script), tmp_path / "e.log")
    with process, pytest.raises(LaunchError) as raised:
        process.wait_healthy(timeout_s=30, poll_s=0.1)
    message = str(raised.value)
    assert "first exception: zmq.error.ZMQError: Address already in use" in message
    assert "EngineCore failed to start" not in message          # 30-line tail starts later
    assert message.rstrip().endswith("traceback line 39")


def test_a_python_that_is_not_there_is_a_launch_error(tmp_path: Path) -> None:
    """It was a FileNotFoundError traceback."""
    missing = VllmCommand(worker_id="w", argv=(str(tmp_path / "no-python"), "-m", "vllm"),
                          env={}, url="http://127.0.0.1:1", kv_events_endpoint=None)
    with pytest.raises(LaunchError, match=r"^w: cannot run .*no-python: No such file or "
                       r"directory \(launch.python is read from the directory kvroute runs "
                       r"in\)$"):
        VllmProcess(missing, tmp_path / "w.log").start()


@pytest.mark.integration
def test_a_stop_asked_while_starting_stops_every_server(tmp_path: Path) -> None:
    """Ctrl-C or SIGTERM while the servers load was ignored until --timeout (900 s)."""
    import threading

    from workers.launch.process import LaunchInterrupted

    stop = threading.Event()
    silent = "import time; time.sleep(60)"
    fleet = VllmFleet([command("slow", free_port(), silent)], tmp_path)
    threading.Timer(0.5, stop.set).start()
    with pytest.raises(LaunchInterrupted):
        fleet.start(timeout_s=60, stop=stop)
    assert fleet.exited() == [(fleet.processes[0], -15)]     # stopped by start()


@pytest.mark.integration
def test_a_server_that_ends_is_reported_by_exited(tmp_path: Path) -> None:
    import os
    import signal
    import time

    with VllmFleet([command("a", free_port()), command("b", free_port())], tmp_path) as fleet:
        assert fleet.exited() == []
        pid = fleet.processes[1].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not fleet.exited():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert fleet.exited() == [(fleet.processes[1], -9)]
