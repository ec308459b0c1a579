"""One simulated worker: an ``EngineCore`` stepped in virtual time, plus its scrape.

The engine is clock-free; this class owns its clock. A step started at ``t`` with duration
``d`` makes its outputs visible at ``t + d``; requests added meanwhile join the next step,
as in a live vLLM whose busy loop picks them up between steps. ``run_until(t)`` lands every
step that ends at or before ``t`` (in order) and keeps the engine busy while it has work;
pure-decode stretches are coalesced by ``EngineCore.advance`` (one call instead of one
``step`` per token), bounded by the caller's next event so nothing lands late.
"""

from __future__ import annotations

from collections.abc import Callable

from workers.engine.api import EngineRequest, StepResult
from workers.engine.core import EngineCore
from workers.models import WorkerInfo, WorkerSnapshot

LandedHandler = Callable[["SimWorker", float, StepResult], None]


class EngineStalledError(RuntimeError):
    """The engine holds unfinished requests but scheduled nothing."""


class SimWorker:
    __slots__ = ("_in_progress", "busy_s", "clock", "engine", "info", "snapshot")

    def __init__(self, info: WorkerInfo, engine: EngineCore) -> None:
        self.info = info
        self.engine = engine
        self.clock = 0.0                        # end of the step in progress (if any)
        self._in_progress: StepResult | None = None
        self.busy_s = 0.0                       # total time spent stepping
        self.snapshot: WorkerSnapshot | None = None

    @property
    def busy(self) -> bool:
        return self._in_progress is not None

    def fits(self, prompt_tokens: int, output_tokens: int) -> str | None:
        """Why a request cannot be served here at all, or None when it can."""
        total = prompt_tokens + output_tokens
        if total > self.engine.max_model_len:
            return f"{total} tokens exceed max_model_len {self.engine.max_model_len}"
        capacity = self.engine.num_gpu_blocks * self.engine.block_size
        if total > capacity:
            return f"{total} tokens exceed the KV cache ({capacity} tokens)"
        return None

    def submit(self, request: EngineRequest, now: float) -> None:
        """Hand a request to the engine at ``now``; an idle engine starts a step at once."""
        self.engine.add_request(request)
        if self._in_progress is None:
            self._start(now, now)

    def run_until(self, t: float, on_landed: LandedHandler) -> None:
        """Land every step ending at or before ``t``; keep stepping while work remains."""
        while self._in_progress is not None and self.clock <= t:
            landed, at = self._in_progress, self.clock
            self._in_progress = None
            on_landed(self, at, landed)
            if self.engine.has_unfinished_requests():
                self._start(at, t)

    def _start(self, at: float, until: float) -> None:
        reached, result = self.engine.advance(at, until)
        if reached <= at and not result.outputs and not result.finished:
            if self.engine.has_unfinished_requests():
                raise EngineStalledError(f"{self.info.id}: engine scheduled nothing at {at:.3f}s")
            return
        self.busy_s += reached - at
        self.clock = reached
        self._in_progress = result

    def scrape(self, now: float) -> WorkerSnapshot:
        """What a scrape of this worker's ``/metrics`` would return now."""
        stats = self.engine.stats
        self.snapshot = WorkerSnapshot(
            worker_id=self.info.id, healthy=True, scraped_at=now,
            running=stats.num_running, waiting=stats.num_waiting,
            kv_usage=stats.kv_cache_usage, block_size=self.engine.block_size,
            num_gpu_blocks=self.engine.num_gpu_blocks,
            max_model_len=self.engine.max_model_len, served_models=self.info.models,
            prefix_cache_queries=float(stats.prefix_cache_queries),
            prefix_cache_hits=float(stats.prefix_cache_hits),
            num_preemptions=float(stats.num_preemptions))
        return self.snapshot
