"""Start emulated workers as subprocesses (tests, ``kvroute up``) and stop them by pid.

``EmulatorProcess`` runs ``python -m workers.emulator`` for one worker on 127.0.0.1 (a free
port unless one is given) and waits for ``/health``; ``EmulatorFleet`` starts every emulated
worker of a fleet file, in one process or one process each. Both are context managers. A
process that dies before it is healthy raises ``EmulatorStartError`` carrying its stderr.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from workers.direct_http import direct_urlopen, probe_error
from workers.emulator import PARENT_PID_ENV, PID_HEADER
from workers.fleet import FleetConfig, WorkerSpec, load_fleet
from workers.ports import free_port
from workers.tls import readiness_probe_context

# the folder holding the ``workers`` package, put first on the children's import path: they
# run in the caller's working directory, where the fleet's relative paths (TLS files) are
REPO_ROOT = Path(__file__).resolve().parents[2]


class EmulatorStartError(RuntimeError):
    """An emulator process exited or did not become healthy in time."""


def _health(url: str, errors: dict[str, str] | None = None) -> tuple[int, str | None] | None:
    """``url``'s ``/health`` status and the emulator process id it names; None when nothing
    answers there (why, in ``errors[url]``). Never through a proxy: the router reaches its
    workers directly."""
    try:
        with direct_urlopen(f"{url}/health", timeout=1.0,
                            context=readiness_probe_context(url)) as resp:
            return int(resp.status), resp.headers.get(PID_HEADER)
    except (urllib.error.URLError, OSError) as exc:
        if errors is not None:
            errors[url] = probe_error(exc)
        return None


def _healthy(url: str, pid: int, errors: dict[str, str] | None = None) -> bool:
    """Whether ``url`` answers ``/health`` from the emulator process ``pid``: a server of
    another process on that port is not the worker that was started."""
    return _health(url, errors) == (200, str(pid))


def _held_by_another(urls: Sequence[str], pid: int) -> str:
    """`` (... answered by another process)`` when one of ``urls`` answers ``/health`` but
    not from ``pid``; else empty."""
    for url in urls:
        health = _health(url)
        if health is not None and health[1] != str(pid):
            return f" ({url} is answered by another process: is its port taken?)"
    return ""


@dataclass(frozen=True, slots=True)
class EmulatorExit:
    """An emulator process that ended on its own: the workers it served, its pid, its
    status (``-N``: killed by signal N) and the end of its stderr."""

    workers: tuple[str, ...]
    pid: int
    returncode: int
    stderr_tail: str

    def describe(self) -> str:
        if self.returncode < 0:
            try:
                how = f"was killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                how = f"was killed by signal {-self.returncode}"
        else:
            how = f"exited with status {self.returncode}"
        return f"the emulator of {', '.join(self.workers)} (pid {self.pid}) {how}"


class _Subprocess:
    """One ``python -m workers.emulator`` child with its stderr in a temporary file."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        # -P: the caller's directory is not on the path (a workers.py there would shadow it)
        self.argv = [sys.executable, "-P", "-m", "workers.emulator", *argv]
        self.env = {**os.environ, **(env or {})}
        self.env["PYTHONPATH"] = os.pathsep.join(
            part for part in (str(REPO_ROOT), self.env.get("PYTHONPATH", "")) if part)
        self.proc: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None
        self.reported = False        # its own end was reported (``EmulatorFleet.exited``)

    def start(self) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        # the process starting it now is its parent (the one that built it may have forked)
        self.env[PARENT_PID_ENV] = str(os.getpid())
        self.proc = subprocess.Popen(self.argv, env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=self._stderr)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def stderr_text(self, tail: int | None = None) -> str:
        """What it wrote to stderr (``tail``: its last that many bytes at most)."""
        if self._stderr is None:
            return ""
        if tail is None:
            self._stderr.seek(0)
        else:
            self._stderr.seek(max(0, self._stderr.seek(0, os.SEEK_END) - tail))
        return str(self._stderr.read().decode(errors="replace"))

    def wait_healthy(self, urls: Sequence[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        pending = list(urls)
        errors: dict[str, str] = {}      # each URL's last failed probe
        while pending:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise EmulatorStartError(
                    f"emulator exited with status {self.proc.returncode}: "
                    f"{self.stderr_text().strip()[-2000:]}")
            pending = [u for u in pending if not _healthy(u, self.proc.pid, errors)]
            if not pending:
                return
            if time.monotonic() > deadline:
                self.stop()
                probes = "; ".join(f"{url}/health: {errors[url]}" for url in pending
                                   if url in errors)
                raise EmulatorStartError(
                    f"emulator not healthy after {timeout_s:.0f}s at {', '.join(pending)}"
                    f"{_held_by_another(pending, self.proc.pid)}"
                    f"{f' (last probe: {probes})' if probes else ''}: "
                    f"{self.stderr_text().strip()[-2000:]}")
            time.sleep(0.05)

    def stop(self, timeout_s: float = 5.0) -> None:
        self.reported = True          # stopped on purpose: not an end to report
        proc = self.proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout_s)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


class EmulatorProcess:
    """One emulated worker in its own process on 127.0.0.1."""

    def __init__(self, *, gpu: str = "h100", model: str = "llama-3-8b", port: int | None = None,
                 time_scale: float | None = None, emulate: Mapping[str, Any] | None = None,
                 served_model_names: Sequence[str] = (), extra_args: Sequence[str] = (),
                 ready_timeout_s: float = 30.0, wait_ready: bool = True) -> None:
        self.port = port if port is not None else free_port()
        tls = bool((emulate or {}).get("ssl_certfile")) or "--ssl-certfile" in extra_args
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        argv = ["--gpu", gpu, "--model", model, "--host", "127.0.0.1", "--port", str(self.port)]
        if time_scale is not None:
            argv += ["--time-scale", repr(time_scale)]
        for name in served_model_names:
            argv += ["--served-model-name", name]
        if emulate:
            argv += ["--emulate-json", json.dumps(dict(emulate))]
        argv += list(extra_args)
        self._child = _Subprocess(argv)
        self.ready_timeout_s = ready_timeout_s
        self.wait_ready = wait_ready

    @property
    def pid(self) -> int | None:
        return self._child.pid

    def start(self) -> Self:
        self._child.start()
        if self.wait_ready:
            self._child.wait_healthy([self.url], self.ready_timeout_s)
        return self

    def stderr_text(self) -> str:
        return self._child.stderr_text()

    def stop(self) -> None:
        self._child.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class EmulatorFleet:
    """Every emulated worker of a fleet file: one process hosting all, or one process each."""

    def __init__(self, fleet: FleetConfig | str | Path, time_scale: float | None = None,
                 one_process: bool = True, overrides: Mapping[str, Any] | None = None,
                 ready_timeout_s: float = 30.0) -> None:
        self.fleet = fleet if isinstance(fleet, FleetConfig) else load_fleet(fleet)
        path = Path(self.fleet.source)
        if not path.is_file():
            raise ValueError("EmulatorFleet needs a fleet loaded from a file "
                             f"(source is {self.fleet.source!r})")
        self.urls = {w.info.id: w.info.url for w in self.fleet.workers if w.emulated}
        self._path = path
        common = ["--fleet", str(path.resolve())]
        if time_scale is not None:
            common += ["--time-scale", repr(time_scale)]
        if overrides:
            common += ["--emulate-json", json.dumps(dict(overrides))]
        # Workers configured to refuse connections from the start are not waited for.
        ready = {w.info.id: w.info.url for w in self.fleet.workers if w.emulate is not None
                 and not (w.emulate.get("faults") or {}).get("refuse_connections")}
        # worker id -> its own process (one per worker with one_process False, and those add
        # starts); the others are hosted by the one process
        self._own: dict[str, _Subprocess] = {}
        if one_process:
            self._children = [(_Subprocess(common), list(ready.values()))]
        else:
            self._children = []
            for wid, url in self.urls.items():
                child = self._own[wid] = _Subprocess([*common, "--worker", wid])
                self._children.append((child, [url] if wid in ready else []))
        self.ready_timeout_s = ready_timeout_s
        self._common = common
        self._lock = threading.Lock()     # _children: add() runs in a thread
        self._stopped = False

    def add(self, spec: WorkerSpec) -> bool:
        """Start a worker added to the fleet file since, in a process of its own (which reads
        the file as it is then), unless one of these processes serves it at that URL already
        (a worker removed, then added back); a removed worker's own process holding its URL
        is stopped first. Blocks until it answers ``/health``. Whether it started one;
        ``EmulatorStartError`` when it did not come up, or when the worker the one process
        hosts holds its URL (that takes a restart)."""
        worker_id, url = spec.info.id, spec.info.url
        if self.urls.get(worker_id) == url:
            return False
        holder = next((w for w, u in self.urls.items() if u == url and w != worker_id), None)
        if holder is not None:
            with self._lock:
                held = self._own.get(holder)
                if held is None:
                    raise EmulatorStartError(
                        f"{url} is worker {holder}'s, hosted with the workers kvroute up "
                        "started with (one process for them all): restart kvroute up to "
                        f"serve {worker_id} there")
                held.reported = True          # stopped on purpose below
                del self._own[holder]
                self._children = [(c, urls) for c, urls in self._children if c is not held]
                del self.urls[holder]
            held.stop()
        child = _Subprocess([*self._common, "--worker", worker_id])
        child.reported = True      # not watched while it starts: a failure to is raised
        faults = (spec.emulate or {}).get("faults") or {}     # (an empty faults: is None)
        waits = [] if faults.get("refuse_connections") else [url]
        with self._lock:        # (called from a thread: stop() may run meanwhile)
            if self._stopped:
                return False
            self._children.append((child, waits))
            child.start()       # listed first: a stop from now on stops it too
        try:
            child.wait_healthy(waits, self.ready_timeout_s)
        except BaseException:
            child.stop()
            with self._lock:
                self._children.remove((child, waits))
            raise
        with self._lock:
            self.urls[worker_id] = url
            self._own[worker_id] = child
            child.reported = False     # up and running: its end is reported from now on
        return True

    @property
    def pids(self) -> list[int]:
        return [c.pid for c, _ in self._children if c.pid is not None]

    def exited(self) -> list[EmulatorExit]:
        """The processes that ended on their own (killed, or crashed) since the last call,
        reaped: each with the workers it served. A stop's own processes are not listed."""
        ended = []
        with self._lock:       # (add() runs in a thread: it changes these under the lock)
            if self._stopped:
                return []
            for child, _ in self._children:
                proc = child.proc
                if proc is None or child.reported or proc.poll() is None:
                    continue
                child.reported = True
                workers = sorted(w for w, own in self._own.items() if own is child) or sorted(
                    w for w in self.urls if w not in self._own)
                ended.append(EmulatorExit(tuple(workers), proc.pid, proc.returncode,
                                          child.stderr_text(tail=2000).strip()))
        return ended

    def start(self) -> Self:
        try:
            for child, _ in self._children:
                child.start()
            for child, urls in self._children:
                child.wait_healthy(urls, self.ready_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            children = list(self._children)
        for child, _ in children:
            child.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
