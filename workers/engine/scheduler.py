"""Continuous-batching scheduler (vLLM V1 ``Scheduler``, FCFS, chunked prefill, recompute).

Every step each running request asks for ``num_tokens - num_computed_tokens`` new tokens
(a prefill chunk or one decode token) under the step's token budget; blocks that do not fit
preempt the last running request (its blocks go back to the free queue, still cached, and it
is prepended to the waiting queue). Waiting requests are admitted in order, only in steps
without preemption, while the budget, ``max_num_seqs`` and the free blocks allow; the first
one that does not fit blocks the rest (head-of-line blocking). As vLLM's
``--scheduler-reserve-full-isl`` (on by default, ``reserve_full_isl``), "fits" means the
blocks of the whole prompt less its cache hit are free, not only those of its first chunk:
a long prompt waits rather than start a prefill that would preempt it a few steps later.

Prefix-cache queries and hits are counted once, when a never-preempted request is admitted
(vllm-interface.md §2.2, §4.4); a re-lookup after preemption is not counted.

With a LoRA limit (``max_loras``, vLLM's ``--max-loras``, 1 by default when LoRA is on) a
waiting request for an adapter that is not among the running requests' is skipped while
that many adapters run: it stays waiting, ahead of the others, counted as ``deferred``, and
the requests behind it are still tried (vLLM's ``skip_request``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from workers.engine.api import RequestOutput
from workers.engine.kv_cache_manager import KVCacheManager
from workers.engine.request import Request, RequestStatus


@dataclass(slots=True)
class SchedulerOutput:
    """What one step computes: ``scheduled`` pairs (request, new tokens) in batch order."""

    scheduled: list[tuple[Request, int]] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0


@dataclass(slots=True)
class StepUpdate:
    """What one step produced, after its forward pass."""

    outputs: list[RequestOutput] = field(default_factory=list)
    finished: list[Request] = field(default_factory=list)
    num_generation_tokens: int = 0
    num_prompt_tokens_completed: int = 0
    num_cached_prompt_tokens_completed: int = 0     # of those prompts, found in the cache


class Scheduler:
    """Owns the waiting and running queues; the KV-cache manager owns the blocks."""

    def __init__(self, kv_cache_manager: KVCacheManager, max_num_seqs: int,
                 max_num_batched_tokens: int, max_model_len: int,
                 record_outputs: bool = True, max_loras: int = 0,
                 reserve_full_isl: bool = True) -> None:
        self.kv_cache_manager = kv_cache_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.record_outputs = record_outputs
        self.max_loras = max_loras          # distinct adapters running at once (0: no limit)
        self.reserve_full_isl = reserve_full_isl    # admit only whole prompts that fit
        # waiting requests the LoRA limit skipped, until admitted (vLLM's deferred_waiting)
        self._deferred: set[str] = set()
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}

    @property
    def num_deferred(self) -> int:
        """Waiting requests the LoRA limit skipped and that have not run since."""
        return len(self._deferred)

    def add_request(self, request: Request) -> None:
        self.waiting.append(request)
        self.requests[request.request_id] = request

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def finish_request(self, request_id: str) -> Request | None:
        """Abort: drop the request from its queue and free its blocks."""
        request = self.requests.pop(request_id, None)
        if request is None:
            return None
        self._deferred.discard(request_id)
        if request.status == RequestStatus.RUNNING:
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.FINISHED
        request.finish_reason = "abort"
        return request

    # -- one step ------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self._schedule_running(out, self.max_num_batched_tokens)
        if not out.preempted:
            self._schedule_waiting(out, budget)
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        manager = self.kv_cache_manager
        bs = manager.block_size
        running = self.running
        index = 0
        while index < len(running) and budget > 0:
            request = running[index]
            computed = request.num_computed_tokens
            if request.num_tokens - computed == 1 and computed % bs and (computed + 1) % bs:
                # A decode inside a block: allocate_slots would neither allocate nor cache.
                out.scheduled.append((request, 1))
                if request.num_output_tokens:
                    out.num_decode_tokens += 1
                else:
                    out.num_prefill_tokens += 1          # the last token of a prefill
                budget -= 1
                index += 1
                continue
            num_new = min(request.num_tokens - computed, budget,
                          self.max_model_len - 1 - computed)
            if num_new <= 0:
                index += 1
                continue
            scheduled = True
            while manager.allocate_slots(request, num_new) is None:
                victim = running.pop()
                self._preempt(victim, out)
                if victim is request:
                    scheduled = False
                    break
            if not scheduled:
                break
            self._record(out, request, num_new)
            budget -= num_new
            index += 1
        return budget

    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.appendleft(request)
        out.preempted.append(request)

    def _schedule_waiting(self, out: SchedulerOutput, budget: int) -> None:
        manager = self.kv_cache_manager
        waiting = self.waiting
        loras = ({r.lora_name for r in self.running if r.lora_name} if self.max_loras
                 else None)
        skipped: list[Request] = []
        while waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            request = waiting[0]
            if (loras is not None and request.lora_name and request.lora_name not in loras
                    and len(loras) >= self.max_loras):
                skipped.append(waiting.popleft())       # deferred: the others are tried
                self._deferred.add(request.request_id)
                continue
            hit, num_hit = manager.get_computed_blocks(request)
            num_new = min(request.num_tokens - num_hit, budget)
            if manager.allocate_slots(
                    request, num_new, num_hit, hit,
                    full_sequence_must_fit=self.reserve_full_isl) is None:
                break
            waiting.popleft()
            request.probe_evictions, request.probe_hits = -1, []
            self.running.append(request)
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_hit
            if request.num_preemptions == 0 and manager.enable_caching:
                out.prefix_cache_queries += request.num_tokens
                out.prefix_cache_hits += num_hit
            if request.num_cached_tokens < 0:
                request.num_cached_tokens = num_hit
            out.admitted.append(request)
            self._record(out, request, num_new)
            budget -= num_new
            if loras is not None and request.lora_name:
                loras.add(request.lora_name)
                self._deferred.discard(request.request_id)
        waiting.extendleft(reversed(skipped))           # ahead of the others, in order

    @staticmethod
    def _record(out: SchedulerOutput, request: Request, num_new: int) -> None:
        out.scheduled.append((request, num_new))
        if request.num_output_tokens > 0 and num_new == 1 and (
                request.num_computed_tokens == request.num_tokens - 1):
            out.num_decode_tokens += 1
        else:
            out.num_prefill_tokens += num_new

    # -- after the forward pass ------------------------------------------------------------

    def update_from_output(self, out: SchedulerOutput, end_time: float) -> StepUpdate:
        """Advance computed tokens, sample one token for each request whose known tokens
        are now all computed, and finish those that reached their last output token."""
        update = StepUpdate()
        record = self.record_outputs
        outputs_append = update.outputs.append
        generated = prompt_completed = cached_completed = 0
        for request, num_new in out.scheduled:
            computed = request.num_computed_tokens + num_new
            request.num_computed_tokens = computed
            num_tokens = request.num_tokens
            if computed < num_tokens:
                continue                                   # a prefill chunk, nothing sampled
            num_output = request.num_output_tokens + 1
            first = num_output == 1
            if first:
                request.first_token_time = end_time
                prompt_completed += request.num_prompt_tokens
                cached_completed += max(request.num_cached_tokens, 0)
            request.num_output_tokens = num_output
            request.num_tokens = num_tokens + 1
            request.token_times.append(end_time)
            generated += not request.pooling       # an embedding makes no token
            finished = num_output >= request.max_output_tokens
            if record:
                cached = request.num_cached_tokens
                outputs_append(RequestOutput(
                    request.request_id, (request.all_token_ids[num_tokens],), first, finished,
                    request.finish_reason if finished else None, cached if cached > 0 else 0))
            if finished:
                update.finished.append(request)
        update.num_generation_tokens = generated
        update.num_prompt_tokens_completed = prompt_completed
        update.num_cached_prompt_tokens_completed = cached_completed
        for request in update.finished:
            self._free_finished(request)
        return update

    def _free_finished(self, request: Request) -> None:
        self.running.remove(request)
        self.requests.pop(request.request_id, None)
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.FINISHED
