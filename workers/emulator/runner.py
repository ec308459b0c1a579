"""Runs one engine against the wall clock: the single task that steps it.

The engine is clock-free; this runner owns an emulated clock. While the engine is busy the
clock advances by exactly each step's duration (it is held at a step's end until the next step
starts, so the runner's own work never shows up as emulated time, however small the time
scale); while idle it follows the wall clock divided by the time scale, and the first arrival
freezes it so the step that admits the arrival starts at the arrival's time.

Each step: ``engine.step(now)``, sleep ``duration × time_scale`` on the wall clock, then
deliver the step's outputs to per-request queues, publish its KV events and update metrics.
``step lag`` (how late the runner woke up after a step) is recorded for the benchmark.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from workers.emulator.kv_events import KvEventPublisher
from workers.emulator.metrics import EmulatorMetrics
from workers.engine.api import EngineRequest, EngineStats, RequestOutput, StepResult
from workers.task_cancel import cancel_and_wait

log = logging.getLogger(__name__)

MAX_CATCH_UP_S = 0.25        # a chain further behind than this restarts from "now"
OutputQueue = asyncio.Queue[RequestOutput | None]   # None: the engine failed


class EngineLike(Protocol):
    """What the runner uses of ``workers.engine.core.EngineCore``."""

    @property
    def stats(self) -> EngineStats: ...

    def add_request(self, request: EngineRequest) -> None: ...

    def abort_request(self, request_id: str) -> object: ...

    def has_unfinished_requests(self) -> bool: ...

    def step(self, now: float) -> StepResult: ...

    def reset_prefix_cache(self) -> bool: ...


@dataclass(slots=True)
class _Tracked:
    queue: OutputQueue
    arrival: float
    max_tokens: int
    lora_name: str | None
    last_emit: float | None = None


@dataclass(slots=True)
class StepLag:
    """How late the stepping task woke up after each step's scheduled end (wall seconds)."""

    steps: int = 0
    total_s: float = 0.0
    max_s: float = 0.0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=10000))

    def add(self, lag_s: float) -> None:
        self.steps += 1
        self.total_s += lag_s
        self.max_s = max(self.max_s, lag_s)
        self.recent.append(lag_s)


class EngineRunner:
    def __init__(self, engine: EngineLike, time_scale: float, metrics: EmulatorMetrics,
                 publisher: KvEventPublisher | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.time_scale = time_scale
        self.metrics = metrics
        self.publisher = publisher
        self.lag = StepLag()
        self.healthy = True
        self._clock = clock
        self._emu = 0.0
        self._wall = clock()
        self._emu_limit = math.inf
        self._requests: dict[str, _Tracked] = {}
        self._finished_meta: dict[str, tuple[float, int]] = {}   # arrival, max_tokens
        self._idle = True
        self._next_wall: float | None = None      # wall time the running step chain is due
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def now(self) -> float:
        """The emulated clock (seconds)."""
        if self.time_scale <= 0:
            return self._emu
        return min(self._emu + (self._clock() - self._wall) / self.time_scale, self._emu_limit)

    @property
    def num_inflight(self) -> int:
        return len(self._requests)

    @property
    def num_waiting(self) -> int:
        """Requests in the scheduler's waiting queue."""
        return self.engine.stats.num_waiting

    def lora_state(self) -> tuple[list[str], list[str]]:
        """Adapters of waiting (no token yet) and running requests."""
        waiting = [t.lora_name for t in self._requests.values()
                   if t.lora_name and t.last_emit is None]
        running = [t.lora_name for t in self._requests.values()
                   if t.lora_name and t.last_emit is not None]
        return waiting, running

    def submit(self, request: EngineRequest, max_tokens: int,
               queue: OutputQueue | None = None) -> OutputQueue:
        """Queue ``request``; its outputs go to ``queue`` (several requests may share one)."""
        if not self.healthy:
            raise RuntimeError("engine is dead")
        queue = queue if queue is not None else asyncio.Queue()
        if self._idle:
            self._idle = False
            self._freeze(min(self.now(), request.arrival_time))
        self._requests[request.request_id] = _Tracked(queue, request.arrival_time, max_tokens,
                                                      request.lora_name)
        try:
            self.engine.add_request(request)
        except ValueError:           # one it can never run: nothing of it stays
            del self._requests[request.request_id]
            self.metrics.forget(request.request_id)
            raise
        self._wake.set()
        return queue

    def abort(self, request_id: str) -> None:
        self._finished_meta.pop(request_id, None)
        if self._requests.pop(request_id, None) is not None:
            self.engine.abort_request(request_id)
            self.metrics.forget(request_id)
            self._wake.set()

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block (its event goes out with the next step); False while
        requests hold blocks, as vLLM's."""
        reset = self.engine.reset_prefix_cache()
        self._wake.set()
        return reset

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="engine-runner")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        try:
            while True:
                if not self.engine.has_unfinished_requests():
                    self._go_idle()
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                await self._step_once()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("engine step failed; the worker now reports itself unhealthy")
            self.healthy = False
            for request_id, tracked in self._requests.items():
                tracked.queue.put_nowait(None)
                self.metrics.forget(request_id)
            self._requests.clear()

    def _freeze(self, at: float) -> None:
        self._emu, self._wall, self._emu_limit = at, self._clock(), at

    def _go_idle(self) -> None:
        self._next_wall = None
        if not self._idle:
            self._idle = True
            self._emu, self._wall, self._emu_limit = self.now(), self._clock(), math.inf

    async def _step_once(self) -> None:
        wall_before = self._clock()
        start = self.now()
        result = self.engine.step(start)
        end = start + result.duration_s
        wall_start = self._clock()
        self._emu, self._wall, self._emu_limit = start, wall_start, end
        if self.publisher is not None and result.kv_events:
            self.publisher.publish(result.kv_events)
        if result.duration_s > 0 and self.time_scale > 0:
            # Back-to-back steps follow one wall-clock timeline, so a late wake-up is made up
            # by the next steps instead of accumulating (unless it is hopelessly late).
            base = self._next_wall if self._next_wall is not None else wall_before
            target = base + result.duration_s * self.time_scale
            await asyncio.sleep(max(0.0, target - self._clock()))
            lag = max(0.0, self._clock() - target)
            self.lag.add(lag)
            self._next_wall = target if lag <= MAX_CATCH_UP_S else None
        elif not result.outputs and not result.finished:
            # Nothing could be scheduled: wait for an arrival or an abort, never spin.
            self._next_wall = None
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.05):   # not wait_for: it can swallow a cancel
                    await self._wake.wait()
        else:
            await asyncio.sleep(0)
        self._freeze(end)
        self._deliver(result, end)

    def _deliver(self, result: StepResult, end: float) -> None:
        metrics = self.metrics
        for output in result.outputs:
            tracked = self._requests.get(output.request_id)
            if tracked is None:
                continue
            if tracked.last_emit is None:
                metrics.observe_first_token(end - tracked.arrival)
            else:
                metrics.observe_inter_token(end - tracked.last_emit)
            tracked.last_emit = end
            tracked.queue.put_nowait(output)
            if output.finished:
                del self._requests[output.request_id]
                self._finished_meta[output.request_id] = (tracked.arrival, tracked.max_tokens)
        for stats in result.finished:
            meta = self._finished_meta.pop(stats.request_id, None)
            if meta is not None:
                metrics.observe_finished(stats, meta[0], meta[1])
        metrics.observe_engine(self.engine.stats, bool(result.outputs))
        if metrics.lora_info is not None:
            metrics.set_lora_state(*self.lora_state())
