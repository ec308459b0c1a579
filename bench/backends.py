"""Zero-latency emulated workers for the live harness, pinned to the load generator's core.

``ZeroLatencyBackends`` starts ``count`` ``EmulatorProcess``es (time scale 0: they answer at
once, a fixed number of output tokens, so every stream has the same chunk count) serving one
model name, and pins each process's threads to ``cpus`` so the router under test keeps its
own core.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from types import TracebackType

from bench.proc_stats import tree_pids
from bench.targets import MODEL
from workers.emulator.process import EmulatorProcess


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


