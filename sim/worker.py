"""One simulated worker: an ``EngineCore`` stepped in virtual time, plus its scrape.

The engine is clock-free; this class owns its clock. A step started at ``t`` with duration
``d`` makes its outputs visible at ``t + d``; requests submitted meanwhile join the next step,
as in a live vLLM whose busy loop picks them up between steps. ``advance_to(t)`` runs every
step that starts before ``t`` (``EngineCore.advance`` coalesces pure-decode stretches) and
returns what those steps made visible, each with its own time — first tokens, finished
requests and, when the engine publishes them, KV events — so the simulator can apply them
in global time order.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.engine.api import EngineRequest, KVEvent, RequestStats
from workers.engine.core import EngineCore
from workers.models import WorkerInfo, WorkerSnapshot


class EngineStalledError(RuntimeError):
    """The engine holds unfinished requests but scheduled nothing."""


@dataclass(frozen=True, slots=True)
class FirstToken:
    request_id: str


@dataclass(frozen=True, slots=True)
class KvEventsLanding:
    """The KV events of the steps one ``advance_to`` ran, visible when the last one ends
    (a live publisher sends each step's events as that step ends)."""

    worker_id: str
    events: tuple[KVEvent, ...]


Landing = tuple[float, FirstToken | RequestStats | KvEventsLanding]


class SimWorker:
    __slots__ = ("busy_s", "clock", "engine", "info", "lora_adapters", "lora_paths",
                 "snapshot")

    def __init__(self, info: WorkerInfo, engine: EngineCore,
                 lora_adapters: tuple[str, ...] = (),
                 lora_paths: tuple[tuple[str, str], ...] = ()) -> None:
        """``lora_adapters``: those it has loaded, as its ``/v1/models`` would list them
        (``lora_paths``: their paths, as its cards' ``root``)."""
        self.info = info
        self.engine = engine
        self.lora_adapters = lora_adapters
        self.lora_paths = lora_paths
        self.clock = 0.0               # the engine has run every step ending by this time
        self.busy_s = 0.0              # total time spent stepping
        self.snapshot: WorkerSnapshot | None = None

    def fits(self, prompt_tokens: int, output_tokens: int) -> str | None:
        """Why a request can never be served here, or None when it can."""
        total = prompt_tokens + output_tokens
        if prompt_tokens >= self.engine.max_model_len or total > self.engine.max_model_len:
            return f"{total} tokens exceed max_model_len {self.engine.max_model_len}"
        capacity = self.engine.num_gpu_blocks * self.engine.block_size
        if total > capacity:
            return f"{total} tokens exceed the KV cache ({capacity} tokens)"
        return None

    def submit(self, request: EngineRequest, now: float) -> None:
        """Hand a request over at ``now``: an idle engine starts its next step then."""
        if not self.engine.has_unfinished_requests() and self.clock < now:
            self.clock = now
        self.engine.add_request(request)

    def advance_to(self, t: float) -> list[Landing]:
        """Run the steps that start before ``t``; return their visible outputs, timed."""
        engine = self.engine
        if self.clock >= t or not engine.has_unfinished_requests():
            return []
        start = self.clock
        reached, result = engine.advance(start, t)
        if reached <= start:
            raise EngineStalledError(
                f"{self.info.id}: engine scheduled nothing at {start:.3f}s with work queued")
        self.busy_s += reached - start
        self.clock = reached
        finished = {stats.request_id: stats for stats in result.finished}
        landings: list[Landing] = []
        live = engine.scheduler.requests
        for output in result.outputs:
            if output.first:
                done = finished.get(output.request_id)
                request = live.get(output.request_id)
                at = (done.first_token_time if done is not None
                      else request.first_token_time if request is not None else reached)
                landings.append((at, FirstToken(output.request_id)))
        landings.extend((stats.finished_time, stats) for stats in result.finished)
        if result.kv_events:
            landings.append((reached, KvEventsLanding(self.info.id, result.kv_events)))
        return landings

    def scrape(self, now: float) -> WorkerSnapshot:
        """What a scrape of this worker's ``/metrics`` would return now."""
        stats = self.engine.stats
        self.snapshot = WorkerSnapshot(
            worker_id=self.info.id, healthy=True, scraped_at=now,
            running=stats.num_running, waiting=stats.num_waiting,
            kv_usage=stats.kv_cache_usage, block_size=self.engine.block_size,
            num_gpu_blocks=self.engine.num_gpu_blocks,
            max_model_len=self.engine.max_model_len, served_models=self.info.models,
            lora_adapters=self.lora_adapters, lora_paths=self.lora_paths,
            prefix_cache_queries=float(stats.prefix_cache_queries),
            prefix_cache_hits=float(stats.prefix_cache_hits),
            num_preemptions=float(stats.num_preemptions))
        return self.snapshot
