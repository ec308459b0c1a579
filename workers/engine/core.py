"""EngineCore: one emulated vLLM engine, stepped by a caller that owns the clock.

``step(now)`` schedules one batch starting at ``now``, prices it with the step-time model
and returns what becomes visible at ``now + duration``. ``advance(now, until)`` runs steps
back to back while the next one would start before ``until``, coalescing runs of pure
decode steps without a per-request loop (``decode_window``); it reaches exactly the state
and the finished-request stats that stepping one at a time reaches.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from workers.engine.api import (
    EngineConfig,
    EngineRequest,
    EngineStats,
    KVEvent,
    RequestOutput,
    RequestStats,
    StepResult,
)
from workers.engine.block_hash import get_hash_function, none_hash
from workers.engine.block_pool import BlockPool
from workers.engine.capacity import config_limits
from workers.engine.decode_window import DecodeRun
from workers.engine.kv_cache_manager import KVCacheManager
from workers.engine.latency import StepTimeModel
from workers.engine.request import BlockHasher, Request
from workers.engine.scheduler import Scheduler, SchedulerOutput


def request_stats(request: Request) -> RequestStats:
    """The lifecycle record of a finished (or aborted) request."""
    return RequestStats(
        request_id=request.request_id, arrival_time=request.arrival_time,
        first_scheduled_time=request.first_scheduled_time,
        first_token_time=request.first_token_time,
        finished_time=request.token_times[-1] if request.token_times else -1.0,
        num_prompt_tokens=request.num_prompt_tokens,
        num_cached_tokens=max(request.num_cached_tokens, 0),
        num_generation_tokens=0 if request.pooling else request.num_output_tokens,
        num_preemptions=request.num_preemptions, finish_reason=request.finish_reason,
        token_times=tuple(request.token_times))


class EngineCore:
    """The engine contract of ``api.py``; see the module docstring for the clock model."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        limits = config_limits(config)
        self.limits = limits
        self.num_gpu_blocks = limits.num_gpu_blocks
        self.block_size = limits.block_size
        self.max_model_len = limits.max_model_len
        self.max_num_seqs = limits.max_num_seqs
        self.max_num_batched_tokens = limits.max_num_batched_tokens
        self.block_pool = BlockPool(limits.num_gpu_blocks, config.enable_prefix_caching,
                                    config.enable_kv_events, limits.block_size)
        hasher = BlockHasher(get_hash_function(config.hash_algo),
                             none_hash(config.hash_algo, config.hash_seed), limits.block_size,
                             int_chain=config.hash_algo == "builtin")
        self.kv_cache_manager = KVCacheManager(self.block_pool, hasher, limits.max_model_len)
        self.scheduler = Scheduler(self.kv_cache_manager, limits.max_num_seqs,
                                   limits.max_num_batched_tokens, limits.max_model_len,
                                   max_loras=config.max_loras,
                                   reserve_full_isl=config.scheduler_reserve_full_isl)
        self.time_model = StepTimeModel(config.gpu, config.model, config.tensor_parallel)
        self._rng = random.Random(config.seed)
        self._jitter_mu = -0.5 * config.step_jitter ** 2
        self._stats = EngineStats()
        self._aborted: list[RequestStats] = []
        self._decode_run: DecodeRun | None = None

    # -- requests ------------------------------------------------------------------------

    def add_request(self, request: EngineRequest) -> None:
        """Queue a request; a ValueError (vLLM's wording) for one that can never run."""
        num_prompt = len(request.prompt_token_ids)
        if num_prompt == 0:
            raise ValueError("The decoder prompt cannot be empty")
        if num_prompt >= self.max_model_len:
            raise ValueError(
                f"This model's maximum context length is {self.max_model_len} tokens. "
                f"However, your prompt contains {num_prompt} input tokens, which exceeds "
                "this limit even without any output tokens. Please reduce the length of "
                "the input prompt.")
        if not request.output_token_ids:
            raise ValueError(f"request {request.request_id!r} has no output tokens")
        if request.request_id in self.scheduler.requests:
            raise ValueError(f"request {request.request_id!r} is already in the engine")
        self.scheduler.add_request(Request(request, self.max_model_len))

    def abort_request(self, request_id: str) -> bool:
        """Drop a request; its stats (reason ``abort``) come with the next step's result.
        As vLLM, an abort is not a finished request: ``request_success`` does not count it."""
        self._end_decode_run()
        request = self.scheduler.finish_request(request_id)
        if request is None:
            return False
        self._aborted.append(request_stats(request))
        return True

    def reset_prefix_cache(self) -> bool:
        """vLLM's ``/reset_prefix_cache``: forget every cached block (``AllBlocksCleared``
        comes with the next step's events); refused (False) while requests hold blocks."""
        self._end_decode_run()
        return self.block_pool.reset_prefix_cache()

    def prefix_probe(self, prompt_token_ids: Sequence[int]) -> Request:
        """A request that is never scheduled, to ask ``cached_prefix_tokens`` about a prompt."""
        return Request(EngineRequest(request_id="prefix-probe", prompt_token_ids=prompt_token_ids,
                                     output_token_ids=(0,), arrival_time=0.0),
                       self.max_model_len)

    def cached_prefix_tokens(self, probe: Request) -> int:
        """Leading prompt tokens of ``probe`` the prefix cache holds now, counted as a hit
        would count them (full blocks; the last token is always recomputed). Read-only:
        no block is touched or evicted. The probe keeps its block hashes once computed, so
        one probe may be asked of every engine that hashes alike (same algorithm, seed and
        block size)."""
        manager = self.kv_cache_manager
        if not manager.enable_caching:
            return 0
        max_blocks = (probe.num_tokens - 1) // self.block_size
        manager.hasher.extend(probe, max_blocks)
        return len(manager.find_longest_cache_hit(probe.block_hashes, max_blocks)) \
            * self.block_size

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    @property
    def stats(self) -> EngineStats:
        stats = self._stats
        stats.num_running = len(self.scheduler.running)
        stats.num_waiting = len(self.scheduler.waiting)
        stats.num_deferred = self.scheduler.num_deferred
        stats.kv_cache_usage = self.block_pool.get_usage()
        return stats

    # -- stepping ------------------------------------------------------------------------

    def _end_decode_run(self) -> None:
        if self._decode_run is not None:
            self._decode_run.flush()
            self._decode_run = None

    def _jitter(self) -> float:
        sigma = self.config.step_jitter
        if sigma <= 0.0:
            return 1.0
        return self._rng.lognormvariate(self._jitter_mu, sigma)

    def _batch_time(self, out: SchedulerOutput) -> float:
        num_tokens = num_decodes = context = 0
        attn_units = 0.0
        for request, num_new in out.scheduled:
            num_tokens += num_new
            computed = request.num_computed_tokens
            if num_new == 1 and request.num_output_tokens > 0 and (
                    computed == request.num_tokens - 1):
                num_decodes += 1
                context += computed + 1
            else:
                attn_units += num_new * computed + num_new * num_new / 2
        base = self.time_model.step_time(num_tokens, len(out.scheduled), attn_units,
                                         num_decodes, context)
        return base * self._jitter()

    def step(self, now: float) -> StepResult:
        """Schedule and price one batch starting at ``now``."""
        self._end_decode_run()
        scheduler = self.scheduler
        out = scheduler.schedule()
        aborted = tuple(self._aborted)
        self._aborted.clear()
        if not out.scheduled:
            return StepResult(duration_s=0.0, finished=aborted,
                              kv_events=tuple(self.block_pool.take_events()),
                              num_preemptions=len(out.preempted))
        for request in out.admitted:
            if request.first_scheduled_time < 0:
                request.first_scheduled_time = now
        duration = self._batch_time(out)
        update = scheduler.update_from_output(out, now + duration)
        stats = self._stats
        stats.prompt_tokens += update.num_prompt_tokens_completed
        stats.prompt_cached_tokens += update.num_cached_prompt_tokens_completed
        stats.generation_tokens += update.num_generation_tokens
        stats.prefix_cache_queries += out.prefix_cache_queries
        stats.prefix_cache_hits += out.prefix_cache_hits
        stats.num_preemptions += len(out.preempted)
        for request in update.finished:
            stats.request_success[request.finish_reason] += 1
        return StepResult(
            duration_s=duration, outputs=tuple(update.outputs),
            finished=aborted + tuple(request_stats(r) for r in update.finished),
            kv_events=tuple(self.block_pool.take_events()),
            num_prefill_tokens=out.num_prefill_tokens, num_decode_tokens=out.num_decode_tokens,
            num_preemptions=len(out.preempted))

    def advance(self, now: float, until: float) -> tuple[float, StepResult]:
        """Run steps from ``now`` while the next one would start before ``until``.

        Returns the time reached (the end of the last step, possibly past ``until``; ``now``
        when idle) and the merged result. Coalesced decode steps contribute no ``outputs``;
        finished stats (with every token time) and KV events are complete and in order.
        """
        t = now
        outputs: list[RequestOutput] = []
        finished: list[RequestStats] = list(self._aborted)
        self._aborted.clear()
        events: list[KVEvent] = []
        prefill = decode = preemptions = 0
        while t < until and self.scheduler.has_unfinished_requests():
            if self._decode_run is None:
                self._decode_run = DecodeRun.start_if_pure_decode(self)
            if self._decode_run is not None:
                t_end, done, generated = self._decode_run.run(t, until)
                finished.extend(request_stats(r) for r in done)
                events.extend(self.block_pool.take_events())
                decode += generated
                if t_end > t:
                    t = t_end
                    continue
            result = self.step(t)
            finished.extend(result.finished)
            events.extend(result.kv_events)
            preemptions += result.num_preemptions
            if result.duration_s <= 0.0:
                break
            t += result.duration_s
            outputs.extend(result.outputs)
            prefill += result.num_prefill_tokens
            decode += result.num_decode_tokens
        return t, StepResult(duration_s=t - now, outputs=tuple(outputs),
                             finished=tuple(finished), kv_events=tuple(events),
                             num_prefill_tokens=prefill, num_decode_tokens=decode,
                             num_preemptions=preemptions)
