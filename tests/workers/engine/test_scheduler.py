"""Scheduler: token budget, max_num_seqs, chunked prefill, FCFS blocking, the whole-prompt
admission gate, preemption, the LoRA limit."""

from __future__ import annotations

from tests.workers.engine.engine_builders import free_ids, make_kv_cache_manager, make_request
from workers.engine.request import RequestStatus
from workers.engine.scheduler import Scheduler, SchedulerOutput


def make_scheduler(num_blocks: int = 64, max_num_seqs: int = 8,
                   max_num_batched_tokens: int = 64, max_loras: int = 0,
                   reserve_full_isl: bool = True) -> Scheduler:
    manager = make_kv_cache_manager(num_blocks=num_blocks, enable_kv_events=False)
    return Scheduler(manager, max_num_seqs, max_num_batched_tokens, max_model_len=4096,
                     max_loras=max_loras, reserve_full_isl=reserve_full_isl)


def tokens_of(out: SchedulerOutput) -> dict[str, int]:
    return {r.request_id: n for r, n in out.scheduled}


def run_step(scheduler: Scheduler, now: float = 0.0) -> tuple[SchedulerOutput, list[str]]:
    out = scheduler.schedule()
    update = scheduler.update_from_output(out, now)
    return out, [r.request_id for r in update.finished]


def test_long_prompt_is_chunked_under_the_token_budget() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=64)
    scheduler.add_request(make_request("a", list(range(150)), num_output_tokens=2))
    chunks = []
    for _ in range(3):
        out, _ = run_step(scheduler)
        chunks.append(tokens_of(out)["a"])
    assert chunks == [64, 64, 22]
    request = scheduler.running[0]
    assert request.num_output_tokens == 1 and request.num_computed_tokens == 150
    out, finished = run_step(scheduler)
    assert tokens_of(out) == {"a": 1} and out.num_decode_tokens == 1 and finished == ["a"]
    assert not scheduler.has_unfinished_requests()


def test_decodes_go_first_and_new_prefill_takes_the_remaining_budget() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=40)
    scheduler.add_request(make_request("a", list(range(30)), num_output_tokens=5))
    run_step(scheduler)
    scheduler.add_request(make_request("b", list(range(100, 200)), num_output_tokens=5))
    out, _ = run_step(scheduler)
    assert tokens_of(out) == {"a": 1, "b": 39}
    assert (out.num_decode_tokens, out.num_prefill_tokens) == (1, 39)


def test_max_num_seqs_caps_the_running_batch() -> None:
    scheduler = make_scheduler(max_num_seqs=2, max_num_batched_tokens=1000)
    for name in "abc":
        scheduler.add_request(make_request(name, [ord(name)] * 20, num_output_tokens=3))
    out, _ = run_step(scheduler)
    assert list(tokens_of(out)) == ["a", "b"] and [r.request_id for r in scheduler.waiting] == ["c"]


def test_head_of_line_blocking_when_blocks_run_out() -> None:
    # 9 usable blocks of 16 tokens: "a" takes 5, "b" needs 5 and blocks "c" (needs 1).
    scheduler = make_scheduler(num_blocks=10, max_num_batched_tokens=1000)
    scheduler.add_request(make_request("a", list(range(70)), num_output_tokens=50))
    scheduler.add_request(make_request("b", list(range(100, 170)), num_output_tokens=5))
    scheduler.add_request(make_request("c", [1] * 5, num_output_tokens=5))
    out, _ = run_step(scheduler)
    assert tokens_of(out) == {"a": 70}
    assert [r.request_id for r in scheduler.waiting] == ["b", "c"]


def two_long_prompts(reserve_full_isl: bool) -> Scheduler:
    """63 usable blocks, a 256-token budget, two 600-token prompts of 38 blocks each."""
    scheduler = make_scheduler(num_blocks=64, max_num_batched_tokens=256,
                               reserve_full_isl=reserve_full_isl)
    scheduler.add_request(make_request("a", list(range(600)), num_output_tokens=20))
    scheduler.add_request(make_request("b", list(range(1000, 1600)), num_output_tokens=20))
    return scheduler


def test_a_prompt_waits_until_all_of_it_fits_the_free_blocks() -> None:
    """vLLM's --scheduler-reserve-full-isl: b's first chunk fits once a has most of its
    prompt, its whole prompt never does while a runs; it waits instead of being preempted."""
    scheduler = two_long_prompts(reserve_full_isl=True)
    for _ in range(30):
        out, finished = run_step(scheduler)
        assert not out.preempted
        if finished:
            break
    assert finished == ["a"] and [r.request_id for r in scheduler.waiting] == ["b"]
    out, _ = run_step(scheduler)                   # a's blocks are free: b is admitted
    assert [r.request_id for r in out.admitted] == ["b"] and tokens_of(out) == {"b": 256}


def test_without_the_gate_a_first_chunk_is_admitted_and_then_preempted() -> None:
    scheduler = two_long_prompts(reserve_full_isl=False)
    outs = [run_step(scheduler)[0] for _ in range(4)]
    assert tokens_of(outs[2]) == {"a": 88, "b": 168}    # 25 blocks free: the chunk fits
    assert [r.request_id for r in outs[3].preempted] == ["b"]   # its next chunk does not


def test_the_cache_hit_counts_toward_the_whole_prompt_fit() -> None:
    # 9 usable blocks: a (80 tokens, 5 blocks) runs; b repeats a's first 64 tokens, so it
    # needs 2 new blocks for 96 tokens, not 6, and is admitted beside a.
    scheduler = make_scheduler(num_blocks=10, max_num_batched_tokens=1000)
    prompt = list(range(80))
    scheduler.add_request(make_request("a", prompt, num_output_tokens=10))
    run_step(scheduler)
    scheduler.add_request(make_request("b", [*prompt[:64], *range(500, 532)],
                                       num_output_tokens=10))
    out, _ = run_step(scheduler)
    assert [r.request_id for r in out.admitted] == ["b"] and tokens_of(out)["b"] == 32


def test_preemption_recomputes_the_last_running_request() -> None:
    scheduler = make_scheduler(num_blocks=6, max_num_batched_tokens=1000)   # 5 usable
    scheduler.add_request(make_request("a", list(range(32)), num_output_tokens=40))
    scheduler.add_request(make_request("b", list(range(100, 132)), num_output_tokens=40))
    out, _ = run_step(scheduler)                   # a and b take 2 blocks each
    assert tokens_of(out) == {"a": 32, "b": 32} and len(free_ids(scheduler.kv_cache_manager)) == 1
    out, _ = run_step(scheduler)                   # both decode: a takes the last block
    assert out.preempted and [r.request_id for r in out.preempted] == ["b"]
    assert tokens_of(out) == {"a": 1}
    b = scheduler.waiting[0]
    assert b.status == RequestStatus.PREEMPTED and b.num_computed_tokens == 0
    assert b.num_preemptions == 1 and b.num_tokens == 33 and b.num_output_tokens == 1
    # b's blocks went back to the free queue still cached: its re-admission hits them.
    hit, num_hit = scheduler.kv_cache_manager.get_computed_blocks(b)
    assert num_hit == 32 and len(hit) == 2


def test_prefix_cache_counters_count_first_admission_only() -> None:
    scheduler = make_scheduler(num_blocks=64, max_num_batched_tokens=1000)
    prompt = list(range(40))
    scheduler.add_request(make_request("a", prompt, num_output_tokens=1))
    out, _ = run_step(scheduler)
    assert (out.prefix_cache_queries, out.prefix_cache_hits) == (40, 0)
    scheduler.add_request(make_request("b", prompt, num_output_tokens=1))
    out, _ = run_step(scheduler)
    assert (out.prefix_cache_queries, out.prefix_cache_hits) == (40, 32)
    assert tokens_of(out) == {"b": 8} and out.admitted[0].num_cached_tokens == 32


def test_a_preempted_request_s_readmission_is_not_counted_as_a_prefix_cache_query() -> None:
    """vLLM counts prefix-cache queries and hits at a request's first admission only: the
    re-lookup of a preempted request was counted again, its recomputed prompt read as hits."""
    scheduler = make_scheduler(num_blocks=6, max_num_batched_tokens=1000)   # 5 usable
    scheduler.add_request(make_request("a", list(range(32)), num_output_tokens=2))
    scheduler.add_request(make_request("b", list(range(100, 132)), num_output_tokens=40))
    first, _ = run_step(scheduler)
    assert (first.prefix_cache_queries, first.prefix_cache_hits) == (64, 0)
    preempting, finished = run_step(scheduler)     # a takes the last block, b is preempted
    assert [r.request_id for r in preempting.preempted] == ["b"] and finished == ["a"]
    readmitting, _ = run_step(scheduler)
    assert [r.request_id for r in readmitting.admitted] == ["b"]
    assert tokens_of(readmitting) == {"b": 1}     # its 32 prompt tokens hit the cache
    assert (preempting.prefix_cache_queries, preempting.prefix_cache_hits) == (0, 0)
    assert (readmitting.prefix_cache_queries, readmitting.prefix_cache_hits) == (0, 0)
    assert readmitting.admitted[0].num_cached_tokens == 0      # as first admitted


def test_abort_frees_blocks_and_leaves_the_queue() -> None:
    scheduler = make_scheduler(num_blocks=8)
    scheduler.add_request(make_request("a", list(range(20)), num_output_tokens=3))
    run_step(scheduler)
    aborted = scheduler.finish_request("a")
    assert aborted is not None and aborted.finish_reason == "abort"
    assert not scheduler.has_unfinished_requests()
    assert len(free_ids(scheduler.kv_cache_manager)) == 7
    assert scheduler.finish_request("a") is None


def test_a_request_for_another_adapter_waits_while_max_loras_run() -> None:
    """vLLM runs at most ``max_loras`` adapters at once (1 by default): a request for another
    is skipped, not blocking the requests behind it, and keeps its place at the head; the
    emulator ran every adapter together, so spreading adapters over a worker looked free."""
    scheduler = make_scheduler(max_num_batched_tokens=256, max_loras=1)
    for request_id, lora in (("sql-1", "sql"), ("chat-1", "chat"), ("base", None),
                             ("sql-2", "sql"), ("chat-2", "chat")):
        scheduler.add_request(make_request(request_id, list(range(20)), num_output_tokens=2,
                                           lora_name=lora))
    out, _ = run_step(scheduler)
    assert [r.request_id for r in out.admitted] == ["sql-1", "base", "sql-2"]
    assert [r.request_id for r in scheduler.waiting] == ["chat-1", "chat-2"]
    assert scheduler.num_deferred == 2
    out, finished = run_step(scheduler)          # sql's requests end: chat's adapter is next
    assert sorted(finished) == ["base", "sql-1", "sql-2"] and not out.admitted
    out, _ = run_step(scheduler)
    assert [r.request_id for r in out.admitted] == ["chat-1", "chat-2"]
    assert scheduler.num_deferred == 0


def test_a_deferred_request_counts_as_deferred_until_it_runs() -> None:
    """vLLM keeps a skipped request among the deferred until it is scheduled: a step that
    never reached it (the batch full) said 0."""
    scheduler = make_scheduler(max_num_batched_tokens=256, max_loras=1, max_num_seqs=2)
    for request_id, lora in (("sql-1", "sql"), ("chat-1", "chat")):
        scheduler.add_request(make_request(request_id, list(range(20)), num_output_tokens=6,
                                           lora_name=lora))
    run_step(scheduler)
    assert scheduler.num_deferred == 1
    scheduler.add_request(make_request("sql-2", list(range(20)), num_output_tokens=6,
                                       lora_name="sql"))
    run_step(scheduler)               # sql-2 fills the batch
    assert len(scheduler.running) == 2 and scheduler.num_deferred == 1
    run_step(scheduler)               # the batch full: chat-1 is not even looked at
    assert len(scheduler.running) == 2 and scheduler.num_deferred == 1
    scheduler.finish_request("chat-1")
    assert scheduler.num_deferred == 0


def test_without_a_lora_limit_every_adapter_runs_together() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=256)
    for request_id, lora in (("sql-1", "sql"), ("chat-1", "chat"), ("fin-1", "fin")):
        scheduler.add_request(make_request(request_id, list(range(20)), lora_name=lora))
    out, _ = run_step(scheduler)
    assert len(out.admitted) == 3 and scheduler.num_deferred == 0
