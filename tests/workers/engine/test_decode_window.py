"""advance() coalesces decode steps yet ends exactly where step-by-step stepping ends."""

from __future__ import annotations

import random

import pytest

from workers.engine.api import (
    EngineConfig,
    EngineRequest,
    EngineStats,
    KVEvent,
    RequestStats,
    StepResult,
)
from workers.engine.core import EngineCore
from workers.engine.profiles import BUILTIN_GPUS, BUILTIN_MODELS


def mixed_workload(seed: int, count: int, rate: float) -> list[EngineRequest]:
    """Poisson arrivals; shared system prompts; some requests continue an earlier one."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(5000) for _ in range(rng.randrange(16, 300))] for _ in range(4)]
    requests: list[EngineRequest] = []
    t = 0.0
    for i in range(count):
        t += rng.expovariate(rate)
        if requests and rng.random() < 0.2:          # next turn: prompt + answer + more
            prev = rng.choice(requests)
            prompt = [*prev.prompt_token_ids, *prev.output_token_ids]
        else:
            prompt = list(rng.choice(prefixes))
        prompt += [rng.randrange(5000) for _ in range(rng.randrange(1, 300))]
        output = [rng.randrange(5000) for _ in range(rng.randrange(1, 100))]
        requests.append(EngineRequest(f"r{i}", prompt[:1500], output, arrival_time=t))
    return requests


def replay(config: EngineConfig, requests: list[EngineRequest], coalesce: bool,
           ) -> tuple[list[RequestStats], list[KVEvent], EngineStats, int, list[int]]:
    engine = EngineCore(config)
    t, i, outputs = 0.0, 0, 0
    finished: list[RequestStats] = []
    events: list[KVEvent] = []
    while i < len(requests) or engine.has_unfinished_requests():
        while i < len(requests) and requests[i].arrival_time <= t:
            engine.add_request(requests[i])
            i += 1
        if not engine.has_unfinished_requests():
            t = requests[i].arrival_time
            continue
        until = requests[i].arrival_time if i < len(requests) else float("inf")
        if coalesce:
            t, result = engine.advance(t, until)
        else:
            result = engine.step(t)
            t += result.duration_s
        finished += result.finished
        events += result.kv_events
        outputs += len(result.outputs)
    free_order = [b.block_id for b in engine.block_pool.free_block_queue.get_all_free_blocks()]
    return finished, events, engine.stats, outputs, free_order


@pytest.mark.parametrize(("num_gpu_blocks", "max_num_seqs", "rate", "algo", "events",
                          "full_isl", "budget"), [
    (120, 16, 20.0, "sha256", True, True, None),    # KV-bound: preemptions, a blocked head
    (120, 16, 20.0, "builtin", False, True, None),  # through the event-free allocation path
    (400, 6, 30.0, "sha256", True, True, None),     # max_num_seqs-bound
    (5000, 256, 5.0, "builtin", True, True, None),  # roomy: long pure-decode stretches
    # prompts longer than the step's budget: the whole-prompt gate and a first-chunk one
    # (without it) need different blocks for the waiting head
    (120, 16, 20.0, "sha256", True, True, 256),
    (120, 16, 20.0, "sha256", True, False, 256),
    (200, 16, 20.0, "builtin", True, False, 300),
])
def test_advance_finishes_exactly_like_single_steps(num_gpu_blocks: int, max_num_seqs: int,
                                                    rate: float, algo: str, events: bool,
                                                    full_isl: bool, budget: int | None) -> None:
    config = EngineConfig(model=BUILTIN_MODELS["llama-3-8b"], gpu=BUILTIN_GPUS["a100"],
                          num_gpu_blocks=num_gpu_blocks, max_num_seqs=max_num_seqs,
                          enable_kv_events=events, hash_algo=algo, step_jitter=0.05, seed=7,
                          scheduler_reserve_full_isl=full_isl, max_num_batched_tokens=budget)
    requests = mixed_workload(seed=num_gpu_blocks, count=150, rate=rate)
    stepped = replay(config, requests, coalesce=False)
    advanced = replay(config, requests, coalesce=True)
    assert len(stepped[0]) == 150
    assert advanced[0] == stepped[0]                    # every timestamp and token time
    assert advanced[1] == stepped[1]                    # KV events, in order
    assert bool(stepped[1]) == events
    assert advanced[2] == stepped[2]
    assert advanced[3] < stepped[3]                     # coalesced steps carry no outputs
    assert advanced[4] == stepped[4]                    # the same blocks in the same LRU order
    if num_gpu_blocks == 120:
        assert stepped[2].num_preemptions > 0


def test_advance_stops_before_until_and_reports_the_time_reached() -> None:
    config = EngineConfig(model=BUILTIN_MODELS["llama-3-8b"], gpu=BUILTIN_GPUS["h100"],
                          num_gpu_blocks=500)
    engine = EngineCore(config)
    engine.add_request(EngineRequest("a", [1] * 100, [2] * 50, arrival_time=0.0))
    t, result = engine.advance(0.0, 0.1)
    assert t >= 0.1 and t - result.duration_s == 0.0
    last_start = t - engine.time_model.decode_time(1, 100 + result.num_decode_tokens)
    assert last_start < 0.1
    assert result.num_prefill_tokens == 100 and result.finished == ()
    t2, rest = engine.advance(t, float("inf"))
    assert not engine.has_unfinished_requests() and len(rest.finished) == 1
    assert rest.finished[0].finished_time == pytest.approx(t2)
    assert len(rest.finished[0].token_times) == 50
    assert engine.advance(t2, t2 + 1.0) == (t2, StepResult(duration_s=0.0))


def test_abort_during_a_decode_run_is_reported_by_the_next_advance() -> None:
    config = EngineConfig(model=BUILTIN_MODELS["llama-3-8b"], gpu=BUILTIN_GPUS["h100"],
                          num_gpu_blocks=500)
    engine = EngineCore(config)
    engine.add_request(EngineRequest("a", [1] * 40, [2] * 30))
    engine.add_request(EngineRequest("b", [3] * 40, [4] * 30))
    t, _ = engine.advance(0.0, 0.05)                     # prefill, then coalesced decodes
    assert engine.abort_request("a")
    assert engine.scheduler.running[0].num_output_tokens == len(
        engine.scheduler.running[0].token_times)         # the run was written back
    t, result = engine.advance(t, float("inf"))
    assert [(s.request_id, s.finish_reason) for s in result.finished] == [
        ("a", "abort"), ("b", "length")]
    assert result.finished[1].num_generation_tokens == 30
