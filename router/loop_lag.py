"""How late the router's event loop runs, as ``kvroute_event_loop_lag_seconds``.

Every connection is served from one event loop: while a callback holds it (parsing a body
of tens of megabytes, which a worker thread cannot do without the interpreter lock, a
garbage collection, a slow plugin), every request waits. ``LoopLag`` sleeps ``interval_s``
again and again on that loop and records how much later than due it woke: near 0 on an idle
or a busy but fluent loop, the length of the stall when one held it. It runs while the app
runs (``router.app``).

A stall of ``STALL_S`` or more (the process stopped, its machine paused, a collection of
seconds) is also told to ``LoopStalls``: the times the router measured across it, from a
request's sending to its first token or its end, hold the router's stall, not the worker's
pace, and the estimators do not learn from them (``router.director``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from router.loop_metrics import LoopHistogram
from workers.task_cancel import cancel_and_wait

INTERVAL_S = 0.1
# a wake this late is a stall of the router, not the lag of a busy loop (a young collection
# or a large body parsed takes milliseconds to tens of them)
STALL_S = 0.5


class LoopStalls:
    """When the loop last stalled, on ``clock`` (the director's): ``since(t)`` says whether a
    stall happened after ``t``, or is happening (the watch has not woken since it is due)."""

    __slots__ = ("_clock", "_interval_s", "_stalled_at", "_woke_at")

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 interval_s: float = INTERVAL_S) -> None:
        self._clock = clock
        self._interval_s = interval_s
        self._stalled_at = -math.inf
        self._woke_at: float | None = None        # None: not watched (no lag watch runs)

    def woke(self, late_s: float) -> None:
        now = self._woke_at = self._clock()
        if late_s >= STALL_S:
            self._stalled_at = now

    def unwatched(self) -> None:
        """The watch stopped: no stall is told any more."""
        self._woke_at = None

    def since(self, start: float) -> bool:
        if self._stalled_at >= start:
            return True
        woke_at = self._woke_at     # a stall not yet seen: the loop runs what it missed first
        return woke_at is not None and self._clock() - woke_at > self._interval_s + STALL_S


class LoopLag:
    """Records, every ``interval_s``, how late the loop woke into ``histogram`` (and a
    stall into ``stalls``)."""

    __slots__ = ("_histogram", "_interval_s", "_stalls", "_task")

    def __init__(self, histogram: LoopHistogram, interval_s: float = INTERVAL_S,
                 stalls: LoopStalls | None = None) -> None:
        self._histogram = histogram
        self._interval_s = interval_s
        self._stalls = stalls
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        if self._stalls is not None:
            self._stalls.unwatched()

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        observe, interval, stalls = self._histogram.observe, self._interval_s, self._stalls
        while True:
            due = loop.time() + interval
            await asyncio.sleep(interval)
            late = loop.time() - due
            observe(late if late > 0.0 else 0.0)
            if stalls is not None:
                stalls.woke(late)
