"""When the cyclic garbage collector runs in a router process: between event-loop callbacks.

CPython starts a collection from inside whatever code allocates the object that crosses the
young generation's threshold. In the router that is most often a request's own handler, in
the middle of its routing decision: a young collection adds some 0.15–0.25 ms to that one
request (``bench.decision --complete``), an older one several ms. ``LoopCollector`` moves
that work between callbacks: it raises the automatic young threshold far out of the way (a
safety net that bounds memory should a burst allocate faster than the loop gets round) and,
every ``interval_s``, runs the generation CPython would have run by then, by its own rule on
the same counts and thresholds. A collection then lands where the loop would otherwise wait,
or between two requests' steps, not inside one; the collections take about the same time in
all. While few new containers appear between ticks (an idle router: a timer waking it 100
times a second cost 1–2 % of a core) the interval doubles up to ``IDLE_INTERVAL_S``; it
drops back to ``interval_s`` at the first tick that finds a tenth of the young threshold
allocated.

``due_generation`` is that rule; ``collect_due`` applies it once (what the loop task does each
tick, and what ``bench.decision`` does between decisions to time them as the router runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc

DEFAULT_INTERVAL_S = 0.01
IDLE_INTERVAL_S = 1.0
# the automatic young threshold while the loop collects: 100 x CPython's 700
SAFETY_THRESHOLD = 70_000


def due_generation(counts: tuple[int, int, int],
                   thresholds: tuple[int, int, int]) -> int | None:
    """The generation CPython collects for these counts (the oldest over its threshold, when
    the young one is over its own), or ``None`` when none is due.

    CPython also puts off a full collection while the objects that reached the oldest
    generation since the last one are under a quarter of those that live there; Python does
    not expose those numbers, so here a full collection comes when its count is due. After
    ``gc.freeze`` the oldest generation holds only what came after start-up."""
    if counts[0] <= thresholds[0]:
        return None
    for generation in (2, 1):
        if counts[generation] > thresholds[generation]:
            return generation
    return 0


class LoopCollector:
    """Runs due collections from an event-loop task instead of from allocations."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S,
                 safety_threshold: int = SAFETY_THRESHOLD) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s = interval_s
        self.safety_threshold = safety_threshold
        self.thresholds: tuple[int, int, int] = (700, 10, 10)   # replaced by the process's
        self.collections = [0, 0, 0]       # run by this collector, by generation
        self._saved: tuple[int, ...] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        return self._saved is not None

    def install(self) -> None:
        """Take over the young threshold (keeping the process's thresholds as the rule)."""
        if self._saved is not None:
            return
        saved = gc.get_threshold()
        self.thresholds = (saved[0], saved[1], saved[2])
        self._saved = saved
        gc.set_threshold(max(self.safety_threshold, saved[0]), saved[1], saved[2])

    def uninstall(self) -> None:
        """Give the thresholds back as they were."""
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None

    def collect_due(self) -> int | None:
        """Run the collection due now, if any; returns its generation."""
        counts = gc.get_count()
        generation = due_generation((counts[0], counts[1], counts[2]), self.thresholds)
        if generation is not None:
            gc.collect(generation)
            self.collections[generation] += 1
        return generation

    def start(self) -> None:
        """Install and start the loop task (inside a running event loop)."""
        self.install()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="kvroute-gc")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.uninstall()

    def next_interval(self, interval_s: float, allocated: int) -> float:
        """The wait before the next tick, given the last one's and the containers allocated
        (net) since: back to ``interval_s`` when busy, else twice as long, up to idle."""
        if allocated >= max(1, self.thresholds[0] // 10):
            return self.interval_s
        return min(max(interval_s * 2, self.interval_s), max(IDLE_INTERVAL_S, self.interval_s))

    async def _run(self) -> None:
        interval = self.interval_s
        young = gc.get_count()[0]
        while True:
            await asyncio.sleep(interval)
            if not gc.isenabled():      # gc.disable() elsewhere (a test, a profiler) wins
                continue
            count = gc.get_count()[0]
            interval = self.next_interval(interval, count - young)
            self.collect_due()
            young = gc.get_count()[0]
