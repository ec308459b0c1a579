"""Coalesced pure-decode steps: many engine steps without a per-request loop per step.

While every running request is decoding and nothing can be admitted, a step changes only
counters: each request computes one token, and at block boundaries it takes a block from
the free queue or commits a full block to the prefix cache. A ``DecodeRun`` buckets the
running requests by their position within a block once, so a step touches only the few
requests at a boundary (and those that finish); the run persists across ``advance`` calls
and writes the per-request counters back (``flush``) only before the full scheduler runs.

A run stops before any step that the full scheduler would treat differently: a step that
would start at or after ``until``, one whose new blocks would not fit (preemption), one at
which the waiting head would fit, one that evicts a block the head would hit or caches one
it could hit; and it returns after a step in which a request finished while others wait.
The schedule, block ids, events, jitter draws and token times equal step-by-step ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workers.engine.kv_cache_utils import BlockHash, FreeKVCacheBlockQueue
from workers.engine.request import Request, RequestStatus

if TYPE_CHECKING:
    from workers.engine.core import EngineCore


class DecodeRun:
    """The coalesced state of one all-decode batch; valid until ``flush``."""

    __slots__ = ("alive", "core", "ctx", "ends", "finish_at", "fixed", "need_buckets",
                 "num_alive", "reqs", "start", "step")

    def __init__(self, core: EngineCore, reqs: list[Request]) -> None:
        bs = core.block_size
        self.core = core
        self.reqs = reqs
        self.start = [r.num_computed_tokens for r in reqs]
        self.alive = [True] * len(reqs)
        self.need_buckets: list[list[int]] = [[] for _ in range(bs)]
        self.finish_at: dict[int, list[int]] = {}
        ctx = 0
        for i, r in enumerate(reqs):
            c = self.start[i]
            self.need_buckets[c % bs].append(i)
            self.finish_at.setdefault(r.max_output_tokens - r.num_output_tokens, []).append(i)
            ctx += c + 1
        self.ctx = ctx                       # Σ context of the next step
        self.num_alive = len(reqs)
        self.fixed = core.time_model.fixed_time(len(reqs), len(reqs), 0.0, len(reqs))
        self.ends: list[float] = []          # end time of every step run so far
        self.step = 0

    @classmethod
    def start_if_pure_decode(cls, core: EngineCore) -> DecodeRun | None:
        """A run over the current batch, or None when its next step is not pure decode."""
        running = core.scheduler.running
        if (not running or len(running) > core.max_num_batched_tokens
                or core.block_size < 2):
            return None
        if core.scheduler.max_loras and core.scheduler.waiting:
            return None     # the waiting head alone does not say what the LoRA limit admits
        for r in running:
            if r.num_output_tokens == 0 or r.num_computed_tokens != r.num_tokens - 1:
                return None
        return cls(core, list(running))

    def _waiting_head(self) -> tuple[int, Request, set[int]] | None:
        """(free blocks it needs, head, ids of its free cache-hit blocks) for the waiting
        head, or None when the scheduler would not try to admit it in a decode-only step.

        The need stays exact while none of those hit blocks is evicted (``run`` checks the
        blocks each step pops), no block it would hit is cached, and nothing is freed.
        """
        scheduler = self.core.scheduler
        if not scheduler.waiting or self.num_alive >= scheduler.max_num_seqs:
            return None
        budget = scheduler.max_num_batched_tokens - self.num_alive
        if budget <= 0:
            return None
        head = scheduler.waiting[0]
        manager = self.core.kv_cache_manager
        hit, num_hit = manager.get_computed_blocks(head)
        num_new = head.num_tokens - num_hit         # the gate's need: the whole prompt
        if not scheduler.reserve_full_isl:
            num_new = min(num_new, budget)          # else its first chunk's
        need = manager.num_blocks_needed(head, num_new, num_hit, hit)
        return need, head, {b.block_id for b in hit if b.ref_cnt == 0}

    def run(self, t: float, until: float) -> tuple[float, list[Request], int]:
        """Run steps from ``t``: (time reached, requests finished in order, tokens)."""
        core = self.core
        waiting_head = self._waiting_head()
        head_need, head, head_free_hits = (
            waiting_head if waiting_head is not None else (0, None, set()))
        others_waiting = bool(core.scheduler.waiting)
        pool = core.block_pool
        queue = pool.free_block_queue
        bs = core.block_size
        caching = pool.enable_caching
        jitter = core._jitter if core.config.step_jitter > 0.0 else None
        per_context_token = core.time_model.decode_time_per_context_token
        start, reqs, buckets = self.start, self.reqs, self.need_buckets
        ends, finish_at = self.ends, self.finish_at
        fixed, ctx, num_alive, step = self.fixed, self.ctx, self.num_alive, self.step
        finished: list[Request] = []
        generated = 0
        while t < until and num_alive:
            j = step + 1
            # Buckets hold live requests only: finished ones are taken out in _finish.
            needs = buckets[(1 - j) % bs]
            if needs:
                free = queue.num_free_blocks
                if len(needs) > free:
                    break                                  # the full step would preempt
            if head is not None:
                if head_need <= queue.num_free_blocks - len(needs):
                    break                                  # the head would be admitted
                if head_free_hits and needs and _pops_any(queue, len(needs), head_free_hits):
                    break                                  # its cache hit would shrink
            fulls = buckets[-j % bs] if caching else needs[:0]
            if head is not None and fulls and self._caches_head_block(fulls, j,
                                                                      head.block_hashes):
                break
            if needs or fulls:
                for i in sorted(needs + fulls) if needs and fulls else (needs or fulls):
                    self._block_boundary(reqs[i], start[i] + j)
            duration = fixed + per_context_token * ctx
            if jitter is not None:
                duration *= jitter()
            t += duration
            ends.append(t)
            generated += num_alive
            step = j
            ctx += num_alive
            if j in finish_at:
                self.step, self.ctx = step, ctx
                self._finish(finish_at.pop(j), j, finished)
                fixed, ctx, num_alive = self.fixed, self.ctx, self.num_alive
                if others_waiting:
                    break
        self.step, self.ctx = step, ctx
        stats = core._stats
        stats.generation_tokens += generated
        for r in finished:
            stats.request_success[r.finish_reason] += 1
        return t, finished, generated

    def _block_boundary(self, request: Request, context: int) -> None:
        """The step computing token ``context - 1``: a new block, or a full one cached."""
        pool = self.core.block_pool
        bs = self.core.block_size
        if (context - 1) % bs == 0:
            request.blocks.append(pool.get_new_blocks(1)[0])
            return
        num_full = context // bs
        self.core.kv_cache_manager.hasher.extend(request, num_full)
        pool.cache_full_blocks(request.block_hashes, request.all_token_ids, request.blocks,
                               request.num_cached_blocks, num_full, request.lora_name,
                               request.lora_id, request.event_keys)
        request.num_cached_blocks = num_full

    def _caches_head_block(self, fulls: list[int], j: int,
                           head_hashes: list[BlockHash]) -> bool:
        """Whether a block committed at step ``j`` is one the waiting head would hit."""
        hasher = self.core.kv_cache_manager.hasher
        bs = self.core.block_size
        for i in fulls:
            index = (self.start[i] + j) // bs - 1
            if index < len(head_hashes):
                hasher.extend(self.reqs[i], index + 1)
                if self.reqs[i].block_hashes[index] == head_hashes[index]:
                    return True
        return False

    def _finish(self, done: list[int], j: int, finished: list[Request]) -> None:
        scheduler = self.core.scheduler
        manager = self.core.kv_cache_manager
        bs = self.core.block_size
        for i in done:
            self.alive[i] = False
            self.need_buckets[self.start[i] % bs].remove(i)
            self.ctx -= self.start[i] + j + 1
            request = self.reqs[i]
            _commit(request, self.start[i], j, self.ends)
            finished.append(request)
        self.num_alive -= len(done)
        for i in done:                       # freed in batch order, as the scheduler does
            request = self.reqs[i]
            scheduler.running.remove(request)
            scheduler.requests.pop(request.request_id, None)
            manager.free(request)
            request.status = RequestStatus.FINISHED
        if self.num_alive:
            n = self.num_alive
            self.fixed = self.core.time_model.fixed_time(n, n, 0.0, n)

    def flush(self) -> None:
        """Write the run's progress back into the running requests."""
        if self.step:
            for i, r in enumerate(self.reqs):
                if self.alive[i]:
                    _commit(r, self.start[i], self.step, self.ends)


def _pops_any(queue: FreeKVCacheBlockQueue, count: int, block_ids: set[int]) -> bool:
    """Whether popping ``count`` blocks from the front would take one of ``block_ids``."""
    block = queue.fake_head.next_free_block
    for _ in range(count):
        assert block is not None
        if block.block_id in block_ids:
            return True
        block = block.next_free_block
    return False


def _commit(request: Request, start: int, steps: int, ends: list[float]) -> None:
    request.num_computed_tokens = start + steps
    request.num_output_tokens += steps
    request.num_tokens += steps
    request.token_times.extend(ends[:steps])
