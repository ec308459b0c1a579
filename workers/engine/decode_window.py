"""Coalesced pure-decode steps: many engine steps without a per-request loop per step.

While every running request is decoding and nothing can be admitted, a step changes only
counters: each request computes one token, and at block boundaries it takes a block from
the free queue or commits a full block to the prefix cache. Requests are bucketed by their
position within a block, so a step touches only the few requests at a boundary (and those
that finish). The window stops before any step that the full scheduler would treat
differently: a step that would start at or after ``until``, one whose new blocks would not
fit (preemption), one at which the waiting head might fit, or one that caches a block the
waiting head could hit; and after a step in which a request finished while others wait.
The schedule, block ids, events, jitter draws and token times equal step-by-step ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workers.engine.kv_cache_utils import BlockHash
from workers.engine.request import BlockHasher, Request, RequestStatus

if TYPE_CHECKING:
    from workers.engine.core import EngineCore


class DecodeWindow:
    """The engine parts a window reads and mutates."""

    __slots__ = ("core", "manager", "pool", "scheduler")

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.scheduler = core.scheduler
        self.manager = core.kv_cache_manager
        self.pool = core.block_pool


def _head_need_lower_bound(window: DecodeWindow, num_running: int) -> tuple[int, Request] | None:
    """Lower bound of the free blocks the waiting head needs to be admitted, or None when
    the scheduler would not try to admit it at all in a decode-only step."""
    scheduler = window.scheduler
    if not scheduler.waiting or num_running >= scheduler.max_num_seqs:
        return None
    budget = scheduler.max_num_batched_tokens - num_running
    if budget <= 0:
        return None
    head = scheduler.waiting[0]
    hit, _ = window.manager.get_computed_blocks(head)
    pinned = sum(1 for b in hit if b.ref_cnt > 0)
    bs = window.manager.block_size
    return -(-min(head.num_tokens, budget) // bs) - pinned, head


def run_decode_window(window: DecodeWindow, t: float,
                      until: float) -> tuple[float, list[Request], int] | None:
    """Run pure-decode steps from ``t``; None when the next step is not pure decode.

    Returns (time reached, requests finished in order, tokens generated).
    """
    scheduler = window.scheduler
    running = scheduler.running
    num_running = len(running)
    bs = window.manager.block_size
    if not num_running or num_running > scheduler.max_num_batched_tokens or bs < 2:
        return None
    for r in running:
        if r.num_output_tokens == 0 or r.num_computed_tokens != r.num_tokens - 1:
            return None
    head_bound = _head_need_lower_bound(window, num_running)
    need_lb, head = head_bound if head_bound is not None else (0, None)
    head_hashes = head.block_hashes if head is not None else []
    others_waiting = bool(scheduler.waiting)

    core = window.core
    pool = window.pool
    queue = pool.free_block_queue
    hasher = window.manager.hasher
    caching = pool.enable_caching
    time_model = core.time_model
    reqs = list(running)
    start = [r.num_computed_tokens for r in reqs]
    alive = [True] * num_running
    need_buckets: list[list[int]] = [[] for _ in range(bs)]
    finish_at: dict[int, list[int]] = {}
    ctx = 0
    for i, r in enumerate(reqs):
        c = start[i]
        need_buckets[c % bs].append(i)
        finish_at.setdefault(r.max_output_tokens - r.num_output_tokens, []).append(i)
        ctx += c + 1

    jitter = core._jitter if core.config.step_jitter > 0.0 else None
    per_context_token = time_model.decode_time_per_context_token
    fixed = time_model.fixed_time(num_running, num_running, 0.0, num_running)
    ends: list[float] = []
    finished: list[Request] = []
    generated = 0
    step = 0
    num_alive = num_running
    while t < until and num_alive:
        j = step + 1
        bucket = need_buckets[(1 - j) % bs]
        needs = [i for i in bucket if alive[i]] if bucket else bucket
        free = queue.num_free_blocks
        if len(needs) > free:
            break                                          # the full step would preempt
        if head is not None and need_lb <= free - len(needs):
            break                                          # the head might be admitted
        bucket = need_buckets[(-j) % bs] if caching else []
        fulls = [i for i in bucket if alive[i]] if bucket else bucket
        if head is not None and fulls and _caches_head_block(reqs, start, fulls, j, bs,
                                                             hasher, head_hashes):
            break
        for i in sorted(needs + fulls) if needs and fulls else (needs or fulls):
            r = reqs[i]
            if (start[i] + j - 1) % bs == 0:
                r.blocks.append(pool.get_new_blocks(1)[0])
            else:
                num_full = (start[i] + j) // bs
                hasher.extend(r, num_full)
                pool.cache_full_blocks(r.block_hashes, r.all_token_ids, r.blocks,
                                       r.num_cached_blocks, num_full, r.lora_name)
                r.num_cached_blocks = num_full
        duration = fixed + per_context_token * ctx
        if jitter is not None:
            duration *= jitter()
        t += duration
        ends.append(t)
        generated += num_alive
        step = j
        ctx += num_alive
        done = finish_at.get(j)
        if done:
            for i in done:
                alive[i] = False
                ctx -= start[i] + j + 1
                _commit(reqs[i], start[i], j, ends)
                finished.append(reqs[i])
            num_alive -= len(done)
            for i in done:
                _finish(window, reqs[i])
            if num_alive:
                fixed = time_model.fixed_time(num_alive, num_alive, 0.0, num_alive)
            if others_waiting:
                break
    for i, r in enumerate(reqs):
        if alive[i] and step:
            _commit(r, start[i], step, ends)
    stats = core._stats
    stats.generation_tokens += generated
    for r in finished:
        stats.request_success[r.finish_reason] += 1
    return t, finished, generated


def _caches_head_block(reqs: list[Request], start: list[int], fulls: list[int], j: int,
                       bs: int, hasher: BlockHasher, head_hashes: list[BlockHash]) -> bool:
    """Whether a block committed at step ``j`` is one the waiting head would hit."""
    for i in fulls:
        index = (start[i] + j) // bs - 1
        if index < len(head_hashes):
            hasher.extend(reqs[i], index + 1)
            if reqs[i].block_hashes[index] == head_hashes[index]:
                return True
    return False


def _commit(request: Request, start: int, steps: int, ends: list[float]) -> None:
    request.num_computed_tokens = start + steps
    request.num_output_tokens += steps
    request.num_tokens += steps
    request.token_times.extend(ends[:steps])


def _finish(window: DecodeWindow, request: Request) -> None:
    scheduler = window.scheduler
    scheduler.running.remove(request)
    scheduler.requests.pop(request.request_id, None)
    window.manager.free(request)
    request.status = RequestStatus.FINISHED

