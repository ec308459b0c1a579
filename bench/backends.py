"""Zero-latency workers for the live harness, pinned to the load generator's core.

Two kinds, with one interface (``Backends``: ``urls``, ``pids``, a context manager that
starts them and stops them by pid), picked by ``make_backends(kind, ...)``:

* ``ZeroLatencyBackends`` (``emulator``) starts ``count`` ``EmulatorProcess``es (time scale
  0: they answer at once, a fixed number of output tokens, so every stream has the same chunk
  count) serving one model name, and pins each process's threads to ``cpus`` so the router
  under test keeps its own core. Each manages a few hundred requests a second.
* ``MockBackends`` (``mock``) starts ``count`` ``python -m bench.mock_backend`` processes
  (``bench/mock_backend.py``: precomputed answers on a raw ``asyncio.Protocol``), each pinned
  to ``cpus`` with ``taskset``; one serves tens of thousands of requests a second.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Literal, Protocol

from bench.launch import REPO_ROOT, Launched, checkout_env, python_module
from bench.proc_stats import tree_pids
from bench.targets import MODEL
from workers.emulator.process import EmulatorProcess
from workers.ports import free_ports

BackendKind = Literal["emulator", "mock"]


class Backends(Protocol):
    """Started workers: their base URLs and process ids; a context manager."""

    @property
    def urls(self) -> list[str]: ...

    @property
    def pids(self) -> list[int]: ...

    def __enter__(self) -> Backends: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


def pin_tree(root: int, cpus: Iterable[int]) -> None:
    """Set the CPU affinity of every thread of every process under ``root``."""
    wanted = set(cpus)
    for pid in tree_pids(root):
        try:
            tasks = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tasks:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, wanted)


class ZeroLatencyBackends:
    def __init__(self, count: int = 2, output_tokens: int = 16,
                 cpus: Iterable[int] | None = (0,)) -> None:
        self._cpus = tuple(cpus) if cpus is not None else None
        self._workers = [EmulatorProcess(
            model="llama-3.1-8b", time_scale=0.0, served_model_names=[MODEL],
            extra_args=["--output-len", f"fixed:{output_tokens}"]) for _ in range(count)]

    @property
    def urls(self) -> list[str]:
        return [worker.url for worker in self._workers]

    @property
    def pids(self) -> list[int]:
        return [worker.pid for worker in self._workers if worker.pid is not None]

    def start(self) -> ZeroLatencyBackends:
        try:
            for worker in self._workers:
                worker.start()
                if self._cpus is not None and worker.pid is not None:
                    pin_tree(worker.pid, self._cpus)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for worker in self._workers:
            worker.stop()

    def __enter__(self) -> ZeroLatencyBackends:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class MockBackends:
    """``count`` ``bench.mock_backend`` processes on free loopback ports, pinned to ``cpus``
    (None: unpinned); ready once entered (each answers ``/health``)."""

    def __init__(self, count: int = 2, output_tokens: int = 16,
                 cpus: Iterable[int] | None = (0,), start_timeout_s: float = 30.0) -> None:
        self._cpus = ",".join(str(cpu) for cpu in cpus) if cpus is not None else None
        self._output_tokens = output_tokens
        self._timeout_s = start_timeout_s
        self._ports = free_ports(count)
        self._logs: tempfile.TemporaryDirectory[str] | None = None
        self._workers: list[Launched] = []

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self._ports]

    @property
    def pids(self) -> list[int]:
        return [worker.pid for worker in self._workers]

    def _launched(self, port: int, folder: Path) -> Launched:
        argv = [*python_module("bench.mock_backend"), "--port", str(port),
                "--model", MODEL, "--output-tokens", str(self._output_tokens)]
        return Launched(f"mock backend :{port}", argv, folder / f"mock-{port}.log",
                        cpus=self._cpus, cwd=REPO_ROOT, env=checkout_env())

    def start(self) -> MockBackends:
        self._logs = tempfile.TemporaryDirectory(prefix="kvroute-mock-")
        try:
            for port, url in zip(self._ports, self.urls, strict=True):
                worker = self._launched(port, Path(self._logs.name))
                self._workers.append(worker)
                worker.start()
                worker.wait_http(f"{url}/health", timeout_s=self._timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for worker in self._workers:
            worker.stop()
        self._workers.clear()
        if self._logs is not None:
            self._logs.cleanup()
            self._logs = None

    def __enter__(self) -> MockBackends:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def make_backends(kind: BackendKind, count: int, output_tokens: int,
                  cpus: Iterable[int] | None) -> Backends:
    """Workers of ``kind`` (not started: enter the result)."""
    if kind == "mock":
        return MockBackends(count, output_tokens, cpus=cpus)
    return ZeroLatencyBackends(count, output_tokens, cpus=cpus)


_FILLER = ("route the request to the worker that serves it best, soonest and cheapest "
           "with the longest cached prefix")


def chat_body(target_bytes: int = 1069, max_tokens: int = 16,
              stream: bool = False) -> dict[str, object]:
    """A chat-completions body of about ``target_bytes`` bytes (the anchors' 1,069)."""
    import orjson

    def build(user: str) -> dict[str, object]:
        return {"model": MODEL, "max_tokens": max_tokens, "stream": stream,
                "messages": [{"role": "system", "content": "You are a helpful assistant."},
                             {"role": "user", "content": user}]}

    user = ""
    while len(orjson.dumps(build(user))) < target_bytes:
        user = (user + " " + _FILLER).strip()
    overshoot = len(orjson.dumps(build(user))) - target_bytes
    return build(user[:len(user) - overshoot] if overshoot > 0 else user)


