"""CPU time and resident memory of a process tree, read from ``/proc`` (Linux).

The overhead race charges a router with everything its process tree spends: a Rust router's
threads, nginx's workers, LiteLLM's uvicorn children. ``tree_pids`` walks ``/proc/*/stat``
parent links from a root pid; ``cpu_seconds`` sums user + system time of the tree (threads are
included in their process's counters); ``rss_bytes`` sums resident pages
(``process_rss_bytes``: one process's). ``RssSampler``
samples the tree's RSS in a thread while a measurement runs and keeps the peak.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (which may contain spaces)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def tree_pids(root: int) -> list[int]:
    """``root`` and every live descendant."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    result, stack = [], [root]
    while stack:
        pid = stack.pop()
        result.append(pid)
        stack.extend(children.get(pid, ()))
    return result


def process_cpu_seconds(pid: int) -> float:
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    utime, stime = int(fields[11]), int(fields[12])   # stat fields 14 and 15
    return (utime + stime) / CLOCK_TICKS


def cpu_seconds(root: int) -> float:
    """User + system CPU seconds of the live process tree under ``root``."""
    return sum(process_cpu_seconds(pid) for pid in tree_pids(root))


def process_rss_bytes(pid: int) -> int:
    """Resident memory of one process (its threads included, not its children); 0 once it
    is gone."""
    try:
        return int((PROC / str(pid) / "statm").read_text().split()[1]) * PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return 0


def rss_bytes(root: int) -> int:
    """Resident memory of the live process tree under ``root``."""
    return sum(process_rss_bytes(pid) for pid in tree_pids(root))


class RssSampler:
    """Peak RSS of a process tree, sampled every ``interval_s`` until stopped."""

    def __init__(self, root: int, interval_s: float = 0.5) -> None:
        self._root = root
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self.peak_bytes = 0

    def _run(self) -> None:
        while True:
            self.peak_bytes = max(self.peak_bytes, rss_bytes(self._root))
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
