"""Run vLLM servers as child processes: start, wait for ``/health``, stop by pid.

``VllmProcess(command, log_path)`` starts one server in its own process group, writing its
output to ``log_path``; ``wait_healthy`` polls ``GET /health`` until it answers 200, failing
early (with the log's tail) when the process exits; ``stop`` sends SIGTERM to the pid's
group, then SIGKILL after ``grace_s``. ``VllmFleet`` starts several at once (they load in
parallel), waits for all (or until asked to stop), and stops all; ``exited`` tells a
supervisor which servers have ended since. Both are context managers.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from workers.direct_http import direct_urlopen, probe_error
from workers.launch.command import VllmCommand
from workers.tls import readiness_probe_context


class LaunchError(RuntimeError):
    """A server could not start, exited, or did not become healthy in time."""


class LaunchInterrupted(LaunchError):
    """Asked to stop (a signal) while the servers were starting; all were stopped."""


# ``zmq.error.ZMQError: Address already in use``, after vLLM's ``(EngineCore pid=1) ERROR ...]``
_EXCEPTION_LINE = re.compile(r"(?:^|\] )((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): .+)$")


def first_exception(lines: Sequence[str]) -> str | None:
    """The first ``SomeError: message`` line of a log (the root cause), without its prefix."""
    for line in lines:
        match = _EXCEPTION_LINE.search(line.strip())
        if match:
            return match.group(1)
    return None


class VllmProcess:
    """One vLLM server process."""

    def __init__(self, command: VllmCommand, log_path: Path) -> None:
        self.command = command
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self.last_probe_error: str | None = None     # why /health last failed, if it did

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def url(self) -> str:
        return self.command.url

    def start(self) -> None:
        if self._proc is not None:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = self.command.process_env(os.environ)
        with self.log_path.open("ab") as log:
            try:
                self._proc = subprocess.Popen(self.command.argv, env=env, stdout=log,
                                              stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as exc:      # launch.python not there, or not executable
                raise LaunchError(f"{self.command.worker_id}: cannot run "
                                  f"{self.command.argv[0]}: {exc.strerror} (launch.python is "
                                  "read from the directory kvroute runs in)") from None

    def exit_code(self) -> int | None:
        """The process's exit status once it has ended, else None."""
        return self._proc.poll() if self._proc is not None else None

    def poll_healthy(self) -> bool:
        """True once ``/health`` answers 200; raises ``LaunchError`` if the process died."""
        if self._proc is None:
            raise LaunchError(f"{self.command.worker_id}: not started")
        code = self._proc.poll()
        if code is not None:
            raise LaunchError(f"{self.command.worker_id}: vLLM exited with code {code}; "
                              f"log tail:\n{self.log_tail()}")
        try:        # never through a proxy: the router reaches its workers directly
            with direct_urlopen(self.url + "/health", timeout=2.0,
                                context=readiness_probe_context(self.url)) as response:
                healthy = int(response.status) == 200
                self.last_probe_error = None if healthy else f"HTTP {response.status}"
                return healthy
        except (urllib.error.URLError, OSError) as exc:
            self.last_probe_error = probe_error(exc)
            return False

    def wait_healthy(self, timeout_s: float, poll_s: float = 1.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.poll_healthy():
            if time.monotonic() > deadline:
                probe = (f" (last probe of {self.url}/health: {self.last_probe_error})"
                         if self.last_probe_error else "")
                raise LaunchError(f"{self.command.worker_id}: not healthy after {timeout_s:g} s"
                                  f"{probe}; log tail:\n{self.log_tail()}")
            time.sleep(poll_s)

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM the server's process group (by its pid), SIGKILL after ``grace_s``."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10.0)
        # children left behind by the server (engine core) share its group
        _signal_group(proc.pid, signal.SIGKILL)
        return proc.returncode

    def log_tail(self, lines: int = 30) -> str:
        """The log's last ``lines`` lines, preceded by the first exception it records (vLLM's
        engine logs the root cause well before the API server's own traceback ends the log)."""
        with contextlib.suppress(OSError):
            logged = self.log_path.read_text(errors="replace").splitlines()
            tail = "\n".join(logged[-lines:])
            cause = first_exception(logged)
            return f"first exception: {cause}\n{tail}" if cause else tail
        return "(no log)"

    def __enter__(self) -> VllmProcess:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class VllmFleet:
    """Several servers started together and stopped together."""

    def __init__(self, commands: Sequence[VllmCommand], log_dir: Path) -> None:
        self.processes = [VllmProcess(c, log_dir / f"vllm-{c.worker_id}.log") for c in commands]

    def start(self, timeout_s: float = 600.0, stop: threading.Event | None = None) -> None:
        """Start every server, then wait until all are healthy (stopping all on failure).
        ``stop`` set meanwhile (a signal) stops them all and raises ``LaunchInterrupted``."""
        try:
            for process in self.processes:
                process.start()
            deadline = time.monotonic() + timeout_s
            pending = list(self.processes)
            while pending:
                pending = [p for p in pending if not p.poll_healthy()]
                if pending and time.monotonic() > deadline:
                    names = ", ".join(p.command.worker_id for p in pending)
                    probe = pending[0].last_probe_error
                    why = f" (last probe of {pending[0].url}/health: {probe})" if probe else ""
                    raise LaunchError(f"not healthy after {timeout_s:g} s: {names}{why}; log "
                                      f"tail:\n{pending[0].log_tail()}")
                if pending and _wait(stop, 1.0):
                    raise LaunchInterrupted("stopped before every server was healthy")
        except BaseException:
            self.stop()
            raise

    def exited(self) -> list[tuple[VllmProcess, int]]:
        """The servers that have ended, with their exit status."""
        return [(p, code) for p in self.processes if (code := p.exit_code()) is not None]

    def stop(self) -> None:
        for process in self.processes:
            process.stop()

    def __enter__(self) -> VllmFleet:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _wait(stop: threading.Event | None, seconds: float) -> bool:
    """Sleep ``seconds``, or until ``stop`` is set; whether it was."""
    if stop is None:
        time.sleep(seconds)
        return False
    return stop.wait(seconds)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
