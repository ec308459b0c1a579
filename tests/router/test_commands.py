"""``kvroute up``: starts the emulated fleet and the router, prints how to call it, serves
the openai client, and stops everything on Ctrl-C (SIGINT)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from tests.router.gateway_support import FAST, MODEL, REPO_ROOT, fleet_data, wait_healthy
from workers.ports import free_port

pytestmark = pytest.mark.integration


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _stop_with_children(proc: subprocess.Popen[bytes], fleet: Path) -> None:
    """After a failed check: stop ``kvroute up`` as Ctrl-C would; if that does not end it,
    kill it and then the emulator processes it started for ``fleet`` (by pid, each checked
    by its command line first), so that none outlives the test."""
    if proc.poll() is not None:
        return
    children = _children(proc.pid)
    os.kill(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=15)
        return
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    for pid in children:
        with contextlib.suppress(OSError):
            if str(fleet).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)


def _two_worker_up(tmp_path: Path, layout: str, **popen: Any
                   ) -> tuple[subprocess.Popen[bytes], Path, dict[str, int], int]:
    """``kvroute up`` over an H100 and an L40S emulated worker (``layout``: one process, or
    one each), on free ports: (its process, the fleet file, the workers' ports, its port)."""
    ports = {"h100-0": free_port(), "l40s-0": free_port()}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(fleet_data(
        {"h100-0": ("h100", FAST), "l40s-0": ("l40s", FAST)}, ports)))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "router.cli", "up", "--fleet", str(fleet), "--routing",
         str(REPO_ROOT / "config/routing.yaml"), "--port", str(port),
         "--emulator-processes", layout], cwd=REPO_ROOT, **popen)
    return proc, fleet, ports, port


@pytest.mark.parametrize(("layout", "emulators", "stop"), [
    ("one", 1, signal.SIGINT), ("each", 2, signal.SIGINT),
    # a closed terminal: SIGHUP ended the router at once and left the emulators running
    ("each", 2, signal.SIGHUP)], ids=["one-ctrl-c", "each-ctrl-c", "each-hangup"])
def test_up_serves_and_stops_everything_on_ctrl_c_or_a_hangup(
        tmp_path: Path, layout: str, emulators: int, stop: signal.Signals) -> None:
    proc, fleet, ports, port = _two_worker_up(tmp_path, layout, stdout=subprocess.PIPE,
                                              stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout_s=30.0)
        assert len(_children(proc.pid)) == emulators     # the router runs in kvroute up itself
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
        assert reply.usage is not None and reply.usage.completion_tokens == 3
        assert all(_listening(p) for p in ports.values())
        os.kill(proc.pid, stop)
        stdout, _ = proc.communicate(timeout=15)
    finally:
        _stop_with_children(proc, fleet)
    assert proc.returncode == 0
    text = stdout.decode()
    assert f"curl -s http://localhost:{port}/v1/chat/completions" in text
    assert f'OpenAI(base_url="http://localhost:{port}/v1"' in text
    assert not _listening(port)
    assert not any(_listening(p) for p in ports.values())


def test_up_starts_the_emulated_workers_its_fleet_file_gains(tmp_path: Path) -> None:
    """An emulate: worker added to the file under kvroute up was down until a restart: the
    router followed the file, nothing started the worker. Ctrl-C stops it with the rest."""
    import time
    import urllib.request

    ports = {"h100-0": free_port(), "l40s-0": free_port()}
    workers = {"h100-0": ("h100", FAST), "l40s-0": ("l40s", FAST)}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(fleet_data({"h100-0": workers["h100-0"]}, ports)))
    routing = tmp_path / "routing.yaml"
    routing.write_text("profiles:\n  default:\n    filters: [{type: model}, {type: healthy}]\n"
                       "    picker: {type: round-robin}\ndefault_profile: default\n")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "router.cli", "up", "--fleet", str(fleet), "--routing",
         str(routing), "--port", str(port)],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout_s=30.0)
        before = fleet.stat().st_mtime_ns
        fleet.write_text(yaml.safe_dump(fleet_data(workers, ports)))
        os.utime(fleet, ns=(before + 10**9, before + 10**9))
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        deadline = time.monotonic() + 30.0
        reached: set[str] = set()
        while reached != {"h100-0", "l40s-0"}:
            assert time.monotonic() < deadline, reached
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
            reached.add(raw.headers["x-kvroute-worker"])
            time.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['l40s-0']}/health",
                                    timeout=5) as answer:
            assert answer.status == 200
        os.kill(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=15)
    finally:
        _stop_with_children(proc, fleet)
    assert proc.returncode == 0
    assert "emulated worker l40s-0 started" in stderr.decode()
    assert not any(_listening(p) for p in ports.values())


@pytest.mark.parametrize("command", ["serve", "up"])
def test_invalid_files_exit_2_with_the_reason(command: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from router.cli import main
    bad = tmp_path / "routing.yaml"
    bad.write_text("profiles:\n  default:\n    picker: {type: nope}\ndefault_profile: default\n")
    assert main([command, "--routing", str(bad)]) == 2
    assert "profiles.default.picker.type: unknown picker type 'nope'" in capsys.readouterr().err
    assert main([command, "--fleet", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read fleet file" in capsys.readouterr().err


def test_a_routing_file_whose_plugins_cannot_be_built_exits_2_with_the_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file that reads well but whose plugins cannot be built (a tokenizer file missing)
    ended ``serve`` in a traceback of 48 lines and status 1."""
    from router.cli import main
    routing = tmp_path / "routing.yaml"
    routing.write_text(
        "producers:\n  - type: tokens\n    params: {tokenizers: {m: /nonexistent/t.json}}\n"
        "profiles:\n  default:\n    filters: [{type: model}, {type: healthy}]\n"
        "    picker: {type: round-robin}\ndefault_profile: default\n")
    assert main(["serve", "--routing", str(routing), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert f"kvroute: {routing}: cannot be served: " in err and "/nonexistent/t.json" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["serve", "up"])
def test_a_decision_log_that_cannot_be_opened_exits_2_before_anything_starts(
        command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """It ended in a 40-line traceback, after ``up`` had started its emulators."""
    from router.cli import main
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setenv("KVROUTE_DECISION_LOG", str(afile / "dlog.jsonl"))
    ports = {"h100-0": free_port()}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(fleet_data({"h100-0": ("h100", FAST)}, ports)))
    assert main([command, "--fleet", str(fleet)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"kvroute: KVROUTE_DECISION_LOG: cannot open {afile / 'dlog.jsonl'}: Not a directory")
    assert not _listening(ports["h100-0"])
    monkeypatch.setenv("KVROUTE_DECISION_LOG_SAMPLE", "2")
    assert main([command, "--fleet", str(fleet)]) == 2
    assert capsys.readouterr().err.strip() == (
        "kvroute: KVROUTE_DECISION_LOG_SAMPLE: must be between 0 and 1, got 2.0")


@pytest.mark.parametrize("command", ["serve", "up"])
def test_without_default_files_the_option_to_pass_is_named(
        command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An installed kvroute has no ``config/``: run where none is, it says which option to
    pass (it said ``config/fleet.yaml: cannot read fleet file``)."""
    from router.cli import main
    from workers import project_files
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(project_files, "CHECKOUT", tmp_path / "site-packages")
    assert main([command]) == 2
    assert capsys.readouterr().err.strip() == (
        "kvroute: config/fleet.yaml: no such file in this directory (an installed kvroute "
        "carries no config/ folder); it is the default of --fleet: pass --fleet FILE")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text((REPO_ROOT / "config" / "fleet.yaml").read_text())
    assert main([command, "--fleet", str(fleet)]) == 2
    assert "it is the default of --routing: pass --routing FILE" in capsys.readouterr().err


def test_from_another_directory_the_checkouts_files_are_the_defaults(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from router.cli import build_parser
    from router.commands import _default_files, _log_files
    (tmp_path / "config").mkdir()          # a routing file here, no fleet file
    (tmp_path / "config" / "routing.yaml").write_text(
        (REPO_ROOT / "config" / "routing.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["up"])
    assert (args.fleet, args.routing) == (None, None)
    assert _default_files(args)
    assert (args.fleet, args.routing) == (REPO_ROOT / "config" / "fleet.yaml",
                                          Path("config/routing.yaml"))
    with caplog.at_level("INFO", logger="router.commands"):
        _log_files(args)
    # each found on its own: the log says which files are in use
    assert caplog.messages == [f"fleet file {REPO_ROOT / 'config' / 'fleet.yaml'} (default); "
                               "routing file config/routing.yaml (default)"]


@pytest.mark.parametrize(("command", "extra"), [
    ("serve", []), ("serve", ["--processes", "2"]), ("up", [])])
def test_a_port_taken_exits_2_with_the_reason(command: str, extra: list[str], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from router.cli import main
    ports = {"h100-0": free_port()}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(fleet_data({"h100-0": ("h100", FAST)}, ports)))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main([command, "--fleet", str(fleet), "--port", str(port), *extra]) == 2
    assert f"kvroute: cannot listen on 127.0.0.1:{port}: Address already in use" in (
        capsys.readouterr().err)
    assert not _listening(ports["h100-0"])       # up stopped the workers it started


def test_an_ipv6_address_is_written_in_brackets_where_it_cannot_listen() -> None:
    """It read 'cannot listen on ::1:P', where the port cannot be told from the address."""
    from router.app import ListenError, check_port_free
    with socket.socket(socket.AF_INET6) as taken:
        taken.bind(("::1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ListenError, match=rf"^cannot listen on \[::1\]:{port}: "
                                              "Address already in use$"):
            check_port_free("::1", port)


def test_a_host_that_does_not_resolve_says_so() -> None:
    """It read 'Unknown error -2': os.strerror of a resolver's code."""
    from router.app import ListenError, check_port_free
    with pytest.raises(ListenError) as raised:
        check_port_free("no-such-host.invalid", 45123)
    message = str(raised.value)
    assert message.startswith("cannot listen on no-such-host.invalid:45123: the host does not "
                              "resolve: ")
    assert "Unknown error" not in message


@pytest.mark.parametrize("router_host", ["127.0.0.1", "localhost", "0.0.0.0"])
def test_up_refuses_a_router_port_an_emulated_worker_takes_before_starting_it(
        router_host: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The workers start first: the router then found its port taken by one of them."""
    from router.cli import main
    ports = {"h100-0": free_port(), "h100-1": free_port()}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(fleet_data({"h100-0": ("h100", FAST),
                                                "h100-1": ("h100", FAST)}, ports)))
    port = ports["h100-1"]
    assert main(["up", "--fleet", str(fleet), "--host", router_host, "--port", str(port)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"kvroute: --port {port}: emulated worker 'h100-1' of {fleet} listens on "
        f"127.0.0.1:{port} (its emulate.port); give the router another port")
    assert not _listening(ports["h100-0"])       # refused before any worker started


def test_a_router_port_no_emulated_worker_uses_is_no_clash(tmp_path: Path) -> None:
    from router.commands import worker_on_router_port
    from workers.fleet import parse_fleet
    fleet = parse_fleet({**fleet_data({"h100-0": ("h100", FAST)}, {"h100-0": 18101}),
                         "workers": [{"id": "h100-0", "gpu": "h100", "models": [MODEL],
                                      "emulate": {"port": 18101}},
                                     {"id": "far", "gpu": "h100", "models": [MODEL],
                                      "url": "http://10.0.0.5:18102"}]})
    assert worker_on_router_port(fleet, "127.0.0.1", 18100) is None
    assert worker_on_router_port(fleet, "127.0.0.1", 18102) is None    # not started by up
    assert worker_on_router_port(fleet, "10.0.0.9", 18101) is None     # another address
    assert worker_on_router_port(fleet, "::", 18101) is not None


@pytest.mark.parametrize(("command", "extra"), [
    ("serve", []), ("serve", ["--processes", "2"]), ("up", [])])
def test_a_port_another_router_listens_on_is_refused(command: str, extra: list[str],
                                                     tmp_path: Path) -> None:
    """Another router's socket (``SO_REUSEPORT``, as ``serve --processes N`` listens) would
    let a second router join its port and take half its connections: refused as taken."""
    ports = {"h100-0": free_port()}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(fleet_data({"h100-0": ("h100", FAST)}, ports)))
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "router.cli", command, "--fleet", str(fleet), "--port",
             str(port), *extra], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:      # it listened: stop it and its children
                _stop_with_children(proc, fleet)
    assert proc.returncode == 2
    assert f"kvroute: cannot listen on 127.0.0.1:{port}: Address already in use" in (
        err.decode())


@pytest.mark.parametrize("command", ["serve", "up"])
@pytest.mark.parametrize(("option", "message"), [
    (["--tenant-labels", "-1"], "kvroute: tenant_labels: must be >= 0"),
    (["--max-retries", "-1"], "kvroute: max_retries: must be >= 0"),
    (["--gc-interval", "-1"],
     "kvroute: gc_interval_s: must be >= 0 (0: collections as CPython runs them)"),
    (["--port", "70000"], "kvroute: port: must be within 0..65535 (0: any free port)"),
    (["--port", "-1"], "kvroute: port: must be within 0..65535 (0: any free port)"),
    (["--scrape-interval", "nan"],
     "kvroute: scrape_interval_s: must be a finite number of seconds"),
    (["--drain-timeout", "inf"], "kvroute: drain_timeout_s: must be a finite number of seconds"),
    (["--upstream-timeout", "0"], "kvroute: upstream_timeout_s: must be positive"),
    (["--drain-delay", "-1"], "kvroute: drain_delay_s: must be >= 0 (0: stop listening at once)"),
    (["--client-idle-timeout", "0"], "kvroute: client_idle_timeout_s: must be positive"),
    (["--max-body-bytes", "0"], "kvroute: max_body_bytes: must be positive"),
], ids=["tenant-labels", "max-retries", "gc-interval", "port-past-65535", "port-negative",
        "scrape-interval-nan", "drain-timeout-inf", "upstream-timeout-0", "drain-delay",
        "client-idle-timeout", "max-body-bytes"])
def test_options_out_of_range_exit_2_with_the_reason(command: str, option: list[str],
                                                     message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from router.cli import main
    assert main([command, *option]) == 2     # nothing started: no emulator, no port
    assert capsys.readouterr().err.strip() == message


def test_a_response_ttl_under_a_second_exits_2_with_the_reason(
        capsys: pytest.CaptureFixture[str]) -> None:
    from router.cli import main
    assert main(["serve", "--redis-url", "redis://127.0.0.1:1/0", "--response-ttl", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "kvroute: response_ttl_s: must be at least 1 second")


def test_a_malformed_redis_url_exits_2_in_one_line_before_anything_starts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """It was a 55-line traceback from the first connection, seconds into the start."""
    from router.cli import main
    assert main(["serve", "--redis-url", "redis//127.0.0.1:6379/0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "kvroute: redis_url: Redis URL must specify one of the following schemes "
        "(redis://, rediss://, unix://)")


def test_a_redis_key_prefix_with_a_space_exits_2_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    from router.cli import main
    assert main(["serve", "--redis-url", "redis://127.0.0.1:1/0",
                 "--redis-key-prefix", "team a:"]) == 2
    assert capsys.readouterr().err.strip() == (
        "kvroute: redis_key_prefix: must be visible ASCII characters without spaces, "
        "got 'team a:'")


def test_the_redis_key_prefix_is_kvroute_unless_given() -> None:
    from router.cli import build_parser
    from router.commands import _settings
    from router.settings import DEFAULT_REDIS_KEY_PREFIX

    assert DEFAULT_REDIS_KEY_PREFIX == "kvroute:"
    assert build_parser().parse_args(["serve"]).redis_key_prefix is None
    given = build_parser().parse_args(["serve", "--redis-url", "redis://127.0.0.1:1/0",
                                       "--redis-key-prefix", "team-a:"])
    settings = _settings(given, redis_url=given.redis_url,
                         redis_key_prefix=given.redis_key_prefix)
    assert settings is not None and settings.redis_key_prefix == "team-a:"


def test_a_redis_key_prefix_without_a_redis_url_exits_2_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """It was taken and ignored: an operator believing two deployments kept apart."""
    from router.cli import main
    monkeypatch.delenv("KVROUTE_REDIS_URL", raising=False)
    assert main(["serve", "--redis-key-prefix", "team-a:"]) == 2
    assert capsys.readouterr().err.strip() == (
        "kvroute: --redis-key-prefix: names keys in Redis, and no --redis-url (or "
        "$KVROUTE_REDIS_URL) is given")


def test_the_redis_url_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from router.cli import build_parser

    monkeypatch.setenv("KVROUTE_REDIS_URL", "redis://:pw@10.0.0.9:6379/0")
    assert build_parser().parse_args(["serve"]).redis_url == "redis://:pw@10.0.0.9:6379/0"
    assert build_parser().parse_args(["serve", "--redis-url", "redis://r/1"]).redis_url == \
        "redis://r/1"
    monkeypatch.delenv("KVROUTE_REDIS_URL")
    assert build_parser().parse_args(["serve"]).redis_url is None


def test_a_bad_routing_file_stops_the_start_naming_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The one-line reason named the field, not the file (the fleet's errors name theirs)."""
    from router.cli import main

    routing = tmp_path / "routing.yaml"
    routing.write_text("profiles:\n  default:\n    filters: [{type: model}]\n"
                       "    scorers: [{type: prefix, weight: x}]\n"
                       "    picker: {type: max-score}\ndefault_profile: default\n")
    root = Path(__file__).resolve().parents[2]
    assert main(["serve", "--fleet", str(root / "config/fleet.yaml"),
                 "--routing", str(routing)]) == 2
    assert capsys.readouterr().err == (
        f"kvroute: {routing}: invalid: profiles.default.scorers[0].weight: must be a number, "
        "got 'x' (line 4)\n")
    routing.unlink()
    assert main(["serve", "--fleet", str(root / "config/fleet.yaml"),
                 "--routing", str(routing)]) == 2
    assert capsys.readouterr().err.startswith(f"kvroute: {routing}: invalid: cannot read")


def test_up_reaps_and_logs_an_emulator_killed_under_it(tmp_path: Path) -> None:
    """An emulator process killed under kvroute up went unnoticed: no log line, a zombie
    until up exited."""
    import time

    proc, fleet, ports, port = _two_worker_up(tmp_path, "each", stdout=subprocess.DEVNULL,
                                              stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout_s=30.0)
        [killed] = [pid for pid in _children(proc.pid)
                    if b"--worker\0l40s-0" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while Path(f"/proc/{killed}").exists():          # reaped, not left a zombie
            assert time.monotonic() < deadline, "the killed emulator was never reaped"
            time.sleep(0.1)
        assert _listening(ports["h100-0"])                # the other runs on
        os.killpg(proc.pid, signal.SIGINT)      # Ctrl-C in a terminal: the emulators get it too
        _, stderr = proc.communicate(timeout=15)
    finally:
        _stop_with_children(proc, fleet)
    assert proc.returncode == 0
    log = stderr.decode()
    assert f"the emulator of l40s-0 (pid {killed}) was killed by SIGKILL" in log
    assert f"kvroute emulate --fleet {fleet} --worker l40s-0" in log
    assert "the emulator of h100-0" not in log      # ended by the Ctrl-C: not reported


def test_replicas_are_named_by_their_host_unless_told() -> None:
    """Every replica started without ``--replica-id`` was ``router-0``: the pods of one
    Deployment sharing a Redis overwrote each other's in-flight counts and spending."""
    import socket

    from router.cli import build_parser
    parser = build_parser()
    assert parser.parse_args(["serve"]).replica_id == socket.gethostname()
    assert parser.parse_args(["serve", "--replica-id", "r7"]).replica_id == "r7"


@pytest.mark.parametrize("command", ["serve", "up"])
def test_a_plugin_files_code_runs_once_as_the_router_starts(command: str,
                                                            tmp_path: Path) -> None:
    """The routing file is checked before the router builds its own: once the check's
    routing was dropped, its plugin modules went with it, and the router ran the file's code
    a second time."""
    ports = {"h100-0": free_port()}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(fleet_data({"h100-0": ("h100", FAST)}, ports)))
    runs = tmp_path / "runs.txt"
    (tmp_path / "counted.py").write_text(
        f"with open({str(runs)!r}, 'a') as fh:\n    fh.write('ran\\n')\n\n"
        "def register(registry):\n    pass\n")
    routing = tmp_path / "routing.yaml"
    routing.write_text((REPO_ROOT / "config" / "routing.yaml").read_text()
                       + "\nplugin_modules: [counted.py]\n")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "router.cli", command, "--fleet", str(fleet), "--routing",
         str(routing), "--port", str(port)], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _live(port):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the router never listened"
            time.sleep(0.1)
    finally:
        _stop_with_children(proc, fleet)
    assert runs.read_text() == "ran\n"


def _live(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/liveness", timeout=1.0) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@pytest.mark.parametrize("command", ["serve", "up"])
def test_a_log_level_is_taken_in_any_case(command: str, tmp_path: Path) -> None:
    """``--log-level debug``, as vLLM and uvicorn take it, ended in logging's traceback
    (``ValueError: Unknown level: 'debug'``) and status 1 before anything was checked."""
    missing = tmp_path / "missing.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "router.cli", command, "--log-level", "debug", "--fleet",
         str(missing)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2          # taken: on to the next check, the fleet file's
    assert done.stderr == (f"kvroute: {missing}: cannot read fleet file: No such file or "
                           "directory\n")


@pytest.mark.parametrize("command", ["serve", "up"])
def test_an_unknown_log_level_exits_2_in_one_line(command: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from router.cli import main
    assert main([command, "--log-level", "verbose", "--fleet",
                 str(tmp_path / "missing.yaml")]) == 2
    assert capsys.readouterr().err == (
        "kvroute: --log-level: must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL (in any "
        "case), got 'verbose'\n")


@pytest.mark.parametrize("layout", ["one", "each"])
def test_an_emulated_workers_port_taken_exits_2_naming_the_worker(
        layout: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It exited 1 once the emulator had failed, naming only the address it could not
    listen on; refused as the router's own port is, before any worker starts."""
    from router.cli import main
    fleet = tmp_path / "fleet.yaml"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"h100-0": free_port(), "l40s-0": port}
        fleet.write_text(yaml.safe_dump(fleet_data(
            {"h100-0": ("h100", FAST), "l40s-0": ("l40s", FAST)}, ports)))
        code = main(["up", "--fleet", str(fleet), "--port", str(free_port()),
                     "--emulator-processes", layout])
    assert code == 2
    assert capsys.readouterr().err == (
        f"kvroute: emulated worker 'l40s-0' of {fleet}: cannot listen on 127.0.0.1:{port}: "
        "Address already in use (its emulate.port); stop what listens there, or give the "
        "worker another port\n")
    assert not _listening(ports["h100-0"])       # refused before any worker started


def test_an_allowed_origin_no_browser_sends_exits_2_before_anything_starts() -> None:
    """``--allowed-origins a.example`` (no scheme) started a router whose every preflight
    was refused: a browser sends ``Origin: https://a.example``."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "router.cli", "serve", "--port", str(port),
         "--allowed-origins", "https://chat.example.com, a.example"],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:         # it started: stop it as Ctrl-C would
            os.kill(proc.pid, signal.SIGINT)
            proc.wait(timeout=30)
    assert proc.returncode == 2
    assert err.decode() == (
        "kvroute: allowed_origins: 'a.example' is not an origin: give '*' or "
        "scheme://host[:port] as a browser sends it in its Origin header, with no path "
        "(https://chat.example.com, http://localhost:3000)\n")
    assert not _listening(port)
