"""The event loop against hand-computed cases, using the engine's own step-time model."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from policies.base import Decision
from policies.engine import PolicyEngine
from policies.loader import load_routing
from policies.peers.presets import routing_for
from sim.metrics import RequestRecord
from sim.simulator import DecisionPoint, Simulation, SimulationSettings, engine_config
from sim.traces import Trace, load_trace
from workers.engine.latency import StepTimeModel
from workers.engine.profiles import BUILTIN_MODELS, H100_80GB
from workers.fleet import FleetConfig, parse_fleet
from workers.inflight import InflightTracker
from workers.registry import WorkerRegistry

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ROOT = Path(__file__).resolve().parents[2]


def _fleet(gpus: Sequence[str]) -> FleetConfig:
    return parse_fleet({
        "models": {MODEL: {"arch": "llama-3.1-8b"}},
        "workers": [{"id": f"w{i}", "gpu": gpu, "models": [MODEL],
                     "emulate": {"port": 9000 + i}} for i, gpu in enumerate(gpus)]})


def _trace(tmp_path: Path, rows: Sequence[Mapping[str, object]]) -> Trace:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_trace(path)


def _run(trace: Trace, fleet: FleetConfig, policy: str = "round-robin",
         settings: SimulationSettings | None = None) -> list[RequestRecord]:
    engine = PolicyEngine.build(routing_for(policy), fleet, seed=0)
    return Simulation(trace, fleet, engine, settings).run().records


def test_one_worker_one_request_matches_the_latency_model(tmp_path: Path) -> None:
    prompt, output = 1000, 5
    trace = _trace(tmp_path, [{"arrival_s": 0.0, "prompt_tokens": prompt,
                               "output_tokens": output}])
    (record,) = _run(trace, _fleet(["h100"]))
    model = StepTimeModel(H100_80GB, BUILTIN_MODELS["llama-3.1-8b"])
    prefill = model.prefill_time(prompt, 0)                     # one step: 1000 < 8192
    decodes = [model.decode_time(1, prompt + k) for k in range(1, output)]
    assert record.worker_id == "w0"
    assert record.ttft_s == pytest.approx(prefill, rel=1e-12)
    assert record.tpot_s == pytest.approx(sum(decodes) / (output - 1), rel=1e-12)
    assert record.e2e_s == pytest.approx(prefill + sum(decodes), rel=1e-12)
    assert record.queue_s == 0.0
    assert (record.cached_tokens, record.preemptions, record.output_tokens) == (0, 0, output)


def test_second_request_hits_the_shared_block_aligned_prefix(tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": 1500, "output_length": 3, "hash_ids": [1, 2, 3]},
            {"timestamp": 10_000, "input_length": 1400, "output_length": 3,
             "hash_ids": [1, 2, 9]}]
    path = tmp_path / "mooncake.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first, second = _run(load_trace(path), _fleet(["h100"]))
    assert first.cached_tokens == 0
    assert second.cached_tokens == 1024                         # blocks 1 and 2 (2 x 512)
    model = StepTimeModel(H100_80GB, BUILTIN_MODELS["llama-3.1-8b"])
    assert second.ttft_s == pytest.approx(model.prefill_time(1400 - 1024, 1024), rel=1e-12)


def test_cached_prefix_on_the_chosen_worker_and_on_any_worker_when_routed(
        tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": 1500, "output_length": 3, "hash_ids": [1, 2, 3]},
            {"timestamp": 10_000, "input_length": 1400, "output_length": 3,
             "hash_ids": [1, 2, 9]}]
    path = tmp_path / "mooncake.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # round-robin sends the second request to the other worker: the prefix was cached, elsewhere
    first, second = _run(load_trace(path), _fleet(["h100", "h100"]))
    assert (first.worker_id, second.worker_id) == ("w0", "w1")
    assert (first.cached_here_tokens, first.cached_anywhere_tokens) == (0, 0)
    assert (second.cached_here_tokens, second.cached_anywhere_tokens) == (0, 1024)
    assert second.cached_tokens == 0
    assert "round-robin" in second.reason and second.decided_by == "peer-round-robin"
    # a cache-aware policy follows the prefix: cached where it went, and hit there
    first, second = _run(load_trace(path), _fleet(["h100", "h100"]), "sglang-cache-aware")
    assert second.worker_id == first.worker_id
    assert (second.cached_here_tokens, second.cached_anywhere_tokens) == (1024, 1024)
    assert second.cached_tokens == 1024


def test_overload_preempts_the_latest_request_and_both_finish(tmp_path: Path) -> None:
    # 64 blocks of 16 tokens = 1024 tokens of KV; two 300-token prompts generating 400 each
    # need 2 x 700: once both pass 512 tokens (32 blocks each) the next block preempts one.
    rows = [{"arrival_s": 0.0, "prompt_tokens": 300, "output_tokens": 400},
            {"arrival_s": 0.0, "prompt_tokens": 300, "output_tokens": 400}]
    records = _run(_trace(tmp_path, rows), _fleet(["h100"]),
                   settings=SimulationSettings(num_gpu_blocks=64))
    first, second = records
    assert (first.preemptions, second.preemptions) == (0, 1)
    assert first.output_tokens == second.output_tokens == 400
    assert second.e2e_s is not None and first.e2e_s is not None
    assert second.e2e_s > first.e2e_s
    # before the preemption both decoded in lockstep: the same first-token time
    assert first.ttft_s == second.ttft_s


def test_request_larger_than_the_kv_cache_is_rejected_and_counted(tmp_path: Path) -> None:
    rows = [{"arrival_s": 0.0, "prompt_tokens": 2000, "output_tokens": 10},
            {"arrival_s": 0.1, "prompt_tokens": 100, "output_tokens": 10}]
    big, small = _run(_trace(tmp_path, rows), _fleet(["h100"]),
                      settings=SimulationSettings(num_gpu_blocks=64))
    assert big.worker_id is None and big.reject_reason is not None
    assert "2010 tokens exceed" in big.reject_reason and not big.meets_slo
    assert small.completed


def test_same_policy_object_decides_identically_on_live_built_views(tmp_path: Path) -> None:
    """At every arrival, views built the live way (``WorkerRegistry`` over the same snapshots
    and in-flight counts) equal the simulator's, and the policy object, asked again at that
    moment, makes the same decision (ties aside: the picker draws at random among equals)."""
    fleet = _fleet(["h100", "a100", "l40s"])
    rows = [{"arrival_s": 0.05 * i, "prompt_tokens": 500 + 300 * (i % 5), "output_tokens": 50}
            for i in range(40)]
    policy = PolicyEngine.build(load_routing(ROOT / "config" / "routing.yaml"), fleet, seed=1)
    pairs: list[tuple[Decision, Decision]] = []

    def probe(point: DecisionPoint) -> None:
        tracker = InflightTracker()
        registry = WorkerRegistry([w.info for w in sim.workers], tracker)
        for worker in sim.workers:
            if worker.snapshot is not None:
                registry.update(worker.snapshot, fresh=False)
            _copy_inflight(sim.tracker, tracker, worker.info.id)
        live_views = registry.views(point.now)
        assert tuple(live_views) == point.views
        pairs.append((point.decision, policy.decide(point.request, live_views)))

    sim = Simulation(_trace(tmp_path, rows), fleet, policy, on_decision=probe)
    sim.run()
    compared = 0
    for simulated, live in pairs:
        totals = sorted(c.total for c in simulated.candidates)
        if len(totals) > 1 and totals[-1] == totals[-2]:
            continue                     # a tie: the picker's random draw decides
        assert live.worker_id == simulated.worker_id
        assert live.candidates == simulated.candidates
        assert live.reason == simulated.reason
        compared += 1
    assert len(pairs) == 40 and compared >= 20


def _copy_inflight(source: InflightTracker, target: InflightTracker, worker_id: str) -> None:
    src, dst = source.get(worker_id), target.get(worker_id)
    dst.requests, dst.prefill_tokens = src.requests, src.prefill_tokens
    dst.decode_tokens, dst.dispatched_since_scrape = src.decode_tokens, src.dispatched_since_scrape


def test_fleet_kv_tokens_add_up_the_simulated_engines_caches() -> None:
    from sim.simulator import SimulationSettings, build_workers, fleet_kv_tokens
    from workers.fleet import load_fleet

    fleet = load_fleet(Path(__file__).resolve().parents[2] / "config" / "fleets"
                       / "bench-mixed.yaml")
    settings = SimulationSettings()
    engines = [w.engine for w in build_workers(fleet, settings)]
    assert fleet_kv_tokens(fleet, settings) == sum(
        e.num_gpu_blocks * e.block_size for e in engines)
    assert fleet_kv_tokens(fleet, SimulationSettings(num_gpu_blocks=100)) == (
        100 * 16 * len(fleet.workers))


def test_engines_take_the_batch_limits_the_fleet_file_gives() -> None:
    fleet = parse_fleet({
        "models": {MODEL: {"arch": "llama-3.1-8b"}},
        "workers": [{"id": "small", "gpu": "h100", "models": [MODEL],
                     "emulate": {"port": 9000, "max_num_seqs": 8,
                                 "max_num_batched_tokens": 1024}},
                    {"id": "default", "gpu": "h100", "models": [MODEL],
                     "emulate": {"port": 9001}}]})
    small, default = (engine_config(w.info, SimulationSettings(), i)
                      for i, w in enumerate(fleet.workers))
    assert (small.max_num_seqs, small.max_num_batched_tokens) == (8, 1024)
    assert (default.max_num_seqs, default.max_num_batched_tokens) == (None, None)


def test_engines_take_the_kv_cache_settings_of_the_emulate_block() -> None:
    """A worker's num_gpu_blocks, gpu_memory_utilization and max_model_len were checked and
    then ignored: the simulation ran the fleet as if they were not there."""
    from sim.simulator import fleet_kv_tokens

    fleet = parse_fleet({
        "models": {MODEL: {"arch": "llama-3.1-8b"}},
        "workers": [{"id": "tiny", "gpu": "h100", "models": [MODEL],
                     "emulate": {"port": 9000, "num_gpu_blocks": 64, "max_model_len": 1024}},
                    {"id": "lean", "gpu": "h100", "models": [MODEL],
                     "emulate": {"port": 9001, "gpu_memory_utilization": 0.5}},
                    {"id": "plain", "gpu": "h100", "models": [MODEL],
                     "emulate": {"port": 9002, "scheduler_reserve_full_isl": False}}]})
    tiny, lean, plain = (engine_config(w.info, SimulationSettings(), i, w.emulate)
                         for i, w in enumerate(fleet.workers))
    assert (tiny.num_gpu_blocks, tiny.max_model_len) == (64, 1024)
    assert tiny.scheduler_reserve_full_isl and not plain.scheduler_reserve_full_isl
    assert lean.gpu_memory_utilization == 0.5 and plain.gpu_memory_utilization == 0.92
    from workers.engine.capacity import config_limits
    assert config_limits(lean).num_gpu_blocks < config_limits(plain).num_gpu_blocks / 2
    assert fleet_kv_tokens(fleet) == 64 * 16 + sum(
        config_limits(c).num_gpu_blocks * 16 for c in (lean, plain))
    # the simulation's own setting still wins
    assert engine_config(fleet.workers[0].info, SimulationSettings(num_gpu_blocks=10), 0,
                         fleet.workers[0].emulate).num_gpu_blocks == 10


def test_only_the_workers_of_the_simulated_model_count_for_what_is_servable() -> None:
    """Every simulated request asks for the first worker's model: a worker of another model
    with a longer window made requests 'servable' that every worker rejected."""
    from sim.simulator import fleet_kv_tokens, servable
    from sim.traces import SyntheticTokens, TraceRequest

    fleet = parse_fleet({
        "models": {"model-a": {"arch": "llama-3.1-8b"}, "model-b": {"arch": "llama-3.1-8b"}},
        "workers": [{"id": "a", "gpu": "h100", "models": ["model-a"],
                     "emulate": {"port": 9000, "max_model_len": 2048}},
                    {"id": "b", "gpu": "h100", "models": ["model-b"],
                     "emulate": {"port": 9001}}]})
    trace = Trace("t", tuple(TraceRequest(index=i, arrival_s=float(i), num_prompt_tokens=n,
                                          output_tokens=4) for i, n in enumerate((1000, 3000))),
                  SyntheticTokens(0))
    assert [r.num_prompt_tokens for r in servable(trace, fleet).requests] == [1000]
    from workers.engine.capacity import config_limits
    only_a = config_limits(engine_config(fleet.workers[0].info, SimulationSettings(), 0,
                                         fleet.workers[0].emulate))
    assert fleet_kv_tokens(fleet) == only_a.num_gpu_blocks * only_a.block_size


def test_simulated_workers_serve_their_adapters_as_the_emulator_does() -> None:
    """An adapter's path reaches the simulated worker's scrape (the router keys the
    adapter's blocks with it) as the emulator's /v1/models gives it."""
    from sim.simulator import build_workers

    fleet = parse_fleet({
        "models": {MODEL: {"arch": "llama-3.1-8b"}},
        "workers": [
            {"id": "mapped", "gpu": "h100", "models": [MODEL],
             "emulate": {"port": 9000, "lora_adapters": {"sql": "/lora/sql"}}},
            {"id": "listed", "gpu": "h100", "models": [MODEL],
             "emulate": {"port": 9001, "lora_adapters": ["chat"]}}]})
    mapped, listed = build_workers(fleet, SimulationSettings())
    assert mapped.scrape(0.0).lora_paths == (("sql", "/lora/sql"),)
    assert listed.scrape(0.0).lora_paths == (("chat", "/adapters/chat"),)
    assert listed.scrape(0.0).lora_adapters == ("chat",)
