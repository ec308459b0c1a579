"""Start a server process (optionally pinned to CPUs), wait until it answers, stop it by pid.

Every process the harness runs goes through ``Launched``: routers, nginx, emulated workers.
It is started in its own session with output to a log file, pinned with ``taskset -c`` when
``cpus`` is given (``taskset`` execs the program, so the pid is the server's own), and stopped
with SIGTERM to its pid and then to each remaining descendant it spawned (SIGKILL after a
grace period). ``KvrouteUp`` is ``kvroute up`` on a free loopback port, ready once entered.
``emulated_fleet_on_free_ports`` copies a fleet file of emulated workers onto free loopback
ports (``workers.ports.free_ports``: distinct).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.proc_stats import tree_pids
from workers.ports import free_port, free_ports

REPO_ROOT = Path(__file__).resolve().parent.parent


def python_module(module: str) -> list[str]:
    """The command line running ``module`` with this interpreter, safe from the working
    directory (``-P``: a folder there named like one of kvroute's packages is not imported);
    run it with ``checkout_env`` so that it imports this checkout's kvroute, not another the
    interpreter has installed."""
    return [sys.executable, "-P", "-m", module]


def checkout_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment and ``env`` with this checkout first on ``PYTHONPATH``: a
    benchmark run from one checkout (a worktree of another commit) starts that checkout's
    router, not the one the interpreter has installed."""
    merged = {**os.environ, **(env or {})}
    merged["PYTHONPATH"] = os.pathsep.join(
        part for part in (str(REPO_ROOT), merged.get("PYTHONPATH", "")) if part)
    return merged


class LaunchError(RuntimeError):
    """A process exited early or never became ready; the message ends with its log tail."""


def emulated_fleet_on_free_ports(fleet: Path, folder: Path) -> tuple[Path, dict[str, Any]]:
    """A copy of ``fleet`` (in ``folder``) whose emulated workers listen on free ports, and
    its contents (``emulated_fleet``)."""
    data = emulated_fleet(fleet)
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


def emulated_fleet(fleet: Path) -> dict[str, Any]:
    """The contents of ``fleet`` with its emulated workers moved to free ports. Raises
    ``FleetConfigError`` (a ``ValueError``; ``kvroute bench`` refuses it in one line) when the
    file cannot be read, is not a valid fleet once on those ports, or a worker has no
    ``emulate:`` block; the benchmarks call it from their ``check``, before anything starts."""
    from workers.fleet import FleetConfigError, parse_fleet
    from workers.yaml_text import YamlTextError, load_config_yaml

    try:                                # read as workers.fleet.load_fleet reads it
        data = load_config_yaml(fleet.read_text())
    except OSError as exc:
        raise FleetConfigError(f"{fleet}: cannot read fleet file: {exc.strerror}") from exc
    except YamlTextError as exc:
        raise FleetConfigError(f"{fleet}: invalid YAML: {exc}") from exc
    workers = data.get("workers") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(workers, list) or not workers or not all(
            isinstance(w, dict) and "emulate" in w for w in workers):
        parse_fleet(data, str(fleet))           # a malformed file: its own message
        raise FleetConfigError(f"{fleet}: every worker needs an emulate: block")
    ports = iter(free_ports(len(workers)))      # distinct: each worker binds its own
    for worker in workers:
        port = next(ports)
        if isinstance(worker["emulate"], dict) or worker["emulate"] is None:
            worker["emulate"] = {**(worker["emulate"] or {}), "port": port}
    parse_fleet(data, str(fleet))       # (the user's ports, replaced, may not clash here)
    return data


async def wait_all_workers_healthy(session: Any, base_url: str, timeout_s: float = 30.0) -> None:
    """Poll a router's ``/health`` (``session``: an aiohttp client session) until every worker
    of its fleet is healthy; ``LaunchError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        async with session.get(base_url + "/health") as resp:
            health = await resp.json()
        if health.get("workers") and health.get("healthy_workers") == health.get("workers"):
            return
        if time.monotonic() > deadline:
            raise LaunchError(f"not every worker became healthy: {health}")
        await asyncio.sleep(0.1)


def pinned(argv: Sequence[str], cpus: str | None) -> list[str]:
    if cpus is None or shutil.which("taskset") is None:
        return list(argv)
    return ["taskset", "-c", cpus, *argv]


class Launched:
    def __init__(self, name: str, argv: Sequence[str], log_path: Path, *,
                 cpus: str | None = None, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self._argv = pinned(argv, cpus)
        self._env = {**os.environ, **(env or {})}
        self._cwd = cwd
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._process is None:
            raise LaunchError(f"{self.name}: not started")
        return self._process.pid

    def start(self) -> Launched:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self._argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self._env, cwd=self._cwd, start_new_session=True)
        return self

    def wait_http(self, url: str, timeout_s: float = 30.0,
                  headers: Mapping[str, str] | None = None) -> None:
        """Poll ``url`` until it answers below 500; raise if the process dies or time runs out."""
        deadline = time.monotonic() + timeout_s
        request = urllib.request.Request(url, headers=dict(headers or {}))
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise LaunchError(f"{self.name} exited with {self._process.returncode}: "
                                  f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(request, timeout=1.0) as response:
                    if response.status < 500:
                        return
            except urllib.error.HTTPError as exc:
                if exc.code < 500:
                    return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise LaunchError(f"{self.name} not ready at {url} after {timeout_s:.0f}s: "
                          f"{self.log_tail()}")

    def log_tail(self, lines: int = 8) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def stop(self, grace_s: float = 5.0) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        descendants = [pid for pid in tree_pids(process.pid) if pid != process.pid]
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(grace_s)
        for pid in descendants:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> Launched:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class KvrouteUp(Launched):
    """``kvroute up`` (the fleet's emulated workers and the router) on a free loopback port,
    logging to ``folder/kvroute-up.log``; ``options``: more of its command-line options.
    Entering starts it and waits until ``/health`` answers (stopping it if it never does)."""

    def __init__(self, fleet: Path, routing: Path, folder: Path, *options: str,
                 log_level: str = "WARNING") -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        # (the paths resolved here: the router runs in the checkout's directory)
        super().__init__("kvroute up", [
            *python_module("router.cli"), "up", "--fleet", str(fleet.resolve()), "--routing",
            str(routing.resolve()), "--port", str(self.port), *options, "--log-level",
            log_level], folder / "kvroute-up.log", cwd=REPO_ROOT, env=checkout_env())

    def __enter__(self) -> KvrouteUp:
        self.start()
        try:
            self.wait_http(self.base_url + "/health", timeout_s=60.0)
        except BaseException:
            self.stop()
            raise
        return self
