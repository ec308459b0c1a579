"""EngineCore on a virtual clock: calibration, outputs, stats, events, errors."""

from __future__ import annotations

import pytest

from workers.engine.api import (
    AllBlocksCleared,
    BlockStored,
    EngineConfig,
    EngineRequest,
    RequestStats,
)
from workers.engine.core import EngineCore
from workers.engine.profiles import BUILTIN_GPUS, BUILTIN_MODELS


def make_engine(gpu: str = "h100", **kwargs: object) -> EngineCore:
    config = EngineConfig(model=BUILTIN_MODELS["llama-3-8b"], gpu=BUILTIN_GPUS[gpu],
                          **kwargs)  # type: ignore[arg-type]
    return EngineCore(config)


@pytest.mark.parametrize(("gpu", "ttft_s", "decode_s"), [
    ("h100", 0.049, 0.0068), ("a100", 0.146, 0.0105), ("l40s", 0.159, 0.023)])
def test_idle_worker_ttft_and_decode_step_match_the_table(gpu: str, ttft_s: float,
                                                          decode_s: float) -> None:
    engine = make_engine(gpu)
    engine.add_request(EngineRequest("r", list(range(2048)), [5, 6, 7], arrival_time=0.0))
    first = engine.step(0.0)
    second = engine.step(first.duration_s)
    assert first.outputs[0].first and first.outputs[0].new_token_ids == (5,)
    assert first.duration_s == pytest.approx(ttft_s, rel=0.25)
    assert second.duration_s == pytest.approx(decode_s, rel=0.25)
    third = engine.step(first.duration_s + second.duration_s)
    stats = third.finished[0]
    assert stats.first_token_time == pytest.approx(first.duration_s)
    assert stats.first_token_time - stats.arrival_time == pytest.approx(ttft_s, rel=0.25)


def test_outputs_stream_one_token_per_step_and_finish_with_reason() -> None:
    engine = make_engine(num_gpu_blocks=100)
    engine.add_request(EngineRequest("r", [1] * 20, [7, 8, 9], finish_reason="stop",
                                     arrival_time=0.5))
    t, tokens = 1.0, []
    while engine.has_unfinished_requests():
        result = engine.step(t)
        tokens += [tok for out in result.outputs for tok in out.new_token_ids]
        t += result.duration_s
    assert tokens == [7, 8, 9]
    assert result.outputs[0].finished and result.outputs[0].finish_reason == "stop"
    stats = result.finished[0]
    assert stats.first_scheduled_time == 1.0 and stats.finished_time == pytest.approx(t)
    assert stats.num_generation_tokens == 3 and len(stats.token_times) == 3
    assert engine.stats.request_success["stop"] == 1
    assert engine.step(t).duration_s == 0.0


def test_same_prompt_twice_hits_block_aligned_tokens() -> None:
    engine = make_engine(num_gpu_blocks=200)
    prompt = list(range(1000, 1100))                      # 100 tokens: 6 full blocks
    for name in ("a", "b"):
        engine.add_request(EngineRequest(name, prompt, [1]))
        t = 0.0
        while engine.has_unfinished_requests():
            t += engine.step(t).duration_s
    stats = engine.stats
    assert (stats.prefix_cache_queries, stats.prefix_cache_hits) == (200, 96)
    assert (stats.prompt_tokens, stats.generation_tokens) == (200, 2)
    assert stats.num_running == stats.num_waiting == 0 and stats.kv_cache_usage == 0.0


def test_cached_prefix_probe_counts_what_the_next_request_hits_and_touches_nothing() -> None:
    engine = make_engine(num_gpu_blocks=200)
    prompt = list(range(1000, 1100))                      # 100 tokens: 6 full blocks
    probe = engine.prefix_probe([*prompt, 5, 6])
    assert engine.cached_prefix_tokens(probe) == 0
    engine.add_request(EngineRequest("a", prompt, [1]))
    t = 0.0
    while engine.has_unfinished_requests():
        t += engine.step(t).duration_s
    free_before = engine.block_pool.get_num_free_blocks()
    assert engine.cached_prefix_tokens(probe) == 96
    # a prompt of exactly 6 blocks: the last token is recomputed, so 5 blocks hit
    assert engine.cached_prefix_tokens(engine.prefix_probe(prompt[:96])) == 80
    assert engine.cached_prefix_tokens(engine.prefix_probe([9, *prompt])) == 0
    assert engine.block_pool.get_num_free_blocks() == free_before
    engine.add_request(EngineRequest("b", [*prompt, 5, 6], [1]))
    while engine.has_unfinished_requests():
        t += engine.step(t).duration_s
    assert engine.stats.prefix_cache_hits == 96           # what the probe said "b" would hit


def test_kv_events_report_blocks_stored_in_the_step_that_computes_them() -> None:
    engine = make_engine(num_gpu_blocks=50, enable_kv_events=True)
    engine.add_request(EngineRequest("a", list(range(1, 33)), [1, 2]))
    result = engine.step(0.0)
    assert result.kv_events == (BlockStored(
        block_hashes=(1403909460543360175, 1643945449041937783), parent_block_hash=None,
        token_ids=tuple(range(1, 33)), block_size=16, extra_keys=(None, None)),)


def test_usage_counts_blocks_pinned_by_running_requests() -> None:
    engine = make_engine(num_gpu_blocks=11)
    engine.add_request(EngineRequest("a", [3] * 40, [1, 2, 3]))
    engine.step(0.0)
    assert engine.stats.kv_cache_usage == pytest.approx(0.3)
    assert engine.stats.num_running == 1


def test_abort_reports_stats_on_the_next_step() -> None:
    engine = make_engine(num_gpu_blocks=50)
    engine.add_request(EngineRequest("a", [3] * 40, [1, 2, 3], arrival_time=0.0))
    engine.step(0.0)
    assert engine.abort_request("a") and not engine.abort_request("a")
    result = engine.step(1.0)
    assert [s.finish_reason for s in result.finished] == ["abort"]
    # as vLLM, an abort is no finished request: request_success_total does not count it
    assert engine.stats.request_success["abort"] == 0 and engine.stats.kv_cache_usage == 0.0


def test_output_is_cut_at_max_model_len() -> None:
    engine = make_engine(num_gpu_blocks=50, max_model_len=64)
    engine.add_request(EngineRequest("a", [3] * 60, [1] * 10, finish_reason="stop"))
    t = 0.0
    finished: list[RequestStats] = []
    while engine.has_unfinished_requests():
        result = engine.step(t)
        t += result.duration_s
        finished += result.finished
    assert finished[0].num_generation_tokens == 4 and finished[0].finish_reason == "length"


def test_bad_requests_are_refused_with_vllm_wording() -> None:
    engine = make_engine(num_gpu_blocks=50, max_model_len=64)
    with pytest.raises(ValueError, match="maximum context length is 64 tokens"):
        engine.add_request(EngineRequest("a", [1] * 64, [1]))
    with pytest.raises(ValueError, match="cannot be empty"):
        engine.add_request(EngineRequest("a", [], [1]))
    with pytest.raises(ValueError, match="no output tokens"):
        engine.add_request(EngineRequest("a", [1], []))
    engine.add_request(EngineRequest("a", [1], [1]))
    with pytest.raises(ValueError, match="already in the engine"):
        engine.add_request(EngineRequest("a", [1], [1]))


def test_builtin_engine_hashes_equal_the_public_builtin_chain() -> None:
    from workers.engine.block_hash import block_hash_chain

    engine = make_engine(num_gpu_blocks=50, hash_algo="builtin", enable_kv_events=True)
    tokens = list(range(40))
    engine.add_request(EngineRequest("a", tokens, [1]))
    event = engine.step(0.0).kv_events[0]
    public = block_hash_chain(tokens, 16, algo="builtin")
    assert isinstance(event, BlockStored)
    assert event.block_hashes == tuple(int.from_bytes(h, "big") for h in public)


def test_reset_prefix_cache_only_when_idle_and_then_misses() -> None:
    engine = make_engine(num_gpu_blocks=50, enable_kv_events=True)
    engine.add_request(EngineRequest("a", list(range(40)), [1, 2]))
    engine.step(0.0)
    assert engine.reset_prefix_cache() is False
    engine.step(1.0)
    assert engine.reset_prefix_cache() is True
    engine.add_request(EngineRequest("b", list(range(40)), [1]))
    result = engine.step(2.0)
    assert result.kv_events[0] == AllBlocksCleared()
    assert engine.stats.prefix_cache_hits == 0


def test_without_prefix_caching_nothing_is_queried_or_hit() -> None:
    engine = make_engine(num_gpu_blocks=50, enable_prefix_caching=False)
    for name in ("a", "b"):
        engine.add_request(EngineRequest(name, list(range(40)), [1]))
        engine.step(0.0)
    assert (engine.stats.prefix_cache_queries, engine.stats.prefix_cache_hits) == (0, 0)
    assert engine.stats.prompt_tokens == 80
