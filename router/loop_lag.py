"""How late the router's event loop runs, as ``kvroute_event_loop_lag_seconds``.

Every connection is served from one event loop: while a callback holds it (parsing a body
of tens of megabytes, which a worker thread cannot do without the interpreter lock, a
garbage collection, a slow plugin), every request waits. ``LoopLag`` sleeps ``interval_s``
again and again on that loop and records how much later than due it woke: near 0 on an idle
or a busy but fluent loop, the length of the stall when one held it. It runs while the app
runs (``router.app``).
"""

from __future__ import annotations

import asyncio

from router.loop_metrics import LoopHistogram
from workers.task_cancel import cancel_and_wait

INTERVAL_S = 0.1


class LoopLag:
    """Records, every ``interval_s``, how late the loop woke into ``histogram``."""

    __slots__ = ("_histogram", "_interval_s", "_task")

    def __init__(self, histogram: LoopHistogram, interval_s: float = INTERVAL_S) -> None:
        self._histogram = histogram
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        observe, interval = self._histogram.observe, self._interval_s
        while True:
            due = loop.time() + interval
            await asyncio.sleep(interval)
            late = loop.time() - due
            observe(late if late > 0.0 else 0.0)
