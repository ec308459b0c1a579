"""``SimulationSettings(kv_events=True)``: engines publish KV events into the policy's exact
prefix index, hashed as the policy's ``blocks`` producer hashes."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import yaml

from policies.engine import PolicyEngine
from policies.loader import load_routing
from policies.peers.presets import routing_for
from sim.simulator import DecisionPoint, Simulation, SimulationSettings
from sim.traces import Trace, load_trace
from workers.engine.block_hash import to_event_int
from workers.fleet import FleetConfig, parse_fleet

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ROOT = Path(__file__).resolve().parents[2]


def _fleet(workers: int) -> FleetConfig:
    return parse_fleet({
        "models": {MODEL: {"arch": "llama-3.1-8b"}},
        "workers": [{"id": f"w{i}", "gpu": "h100", "models": [MODEL],
                     "emulate": {"port": 9000 + i}} for i in range(workers)]})


def _trace(tmp_path: Path, rows: Sequence[Mapping[str, object]]) -> Trace:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_trace(path)


def _reused_prefixes(count: int, spacing_s: float, seed: int = 7) -> list[dict[str, object]]:
    """Prompts made of one of five shared prefixes and a unique tail: reuse, and (in a small
    cache) evictions."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1, 50_000) for _ in range(rng.randrange(100, 400))]
                for _ in range(5)]
    return [{"arrival_s": spacing_s * i, "output_tokens": 4,
             "prompt_token_ids": rng.choice(prefixes)
             + [rng.randrange(1, 50_000) for _ in range(rng.randrange(20, 200))]}
            for i in range(count)]


def _default_policy(fleet: FleetConfig) -> PolicyEngine:
    return PolicyEngine.build(load_routing(ROOT / "config" / "routing.yaml"), fleet, seed=0)


def test_the_exact_index_ends_equal_to_every_engines_cached_blocks(tmp_path: Path) -> None:
    fleet = _fleet(2)
    sim = Simulation(_trace(tmp_path, _reused_prefixes(60, 0.05)), fleet,
                     _default_policy(fleet),
                     SimulationSettings(kv_events=True, num_gpu_blocks=64))
    records = sim.run().records
    assert all(r.completed for r in records)
    index = sim.exact_index
    assert index is not None
    for worker in sim.workers:
        cached = {to_event_int(h)
                  for h in worker.engine.block_pool.cached_block_hash_to_block}
        assert cached, worker.info.id
        assert index.is_exact(worker.info.id)
        assert {h for h in cached if index.holds(worker.info.id, h)} == cached
        assert index.blocks(worker.info.id) == len(cached)


def test_with_kv_events_the_routed_match_is_what_the_engine_hits(tmp_path: Path) -> None:
    """Requests far enough apart that each one's events have landed before the next: the
    prefix the policy saw on the chosen worker is exactly the prefix the engine reused,
    evictions included (64 blocks of 16 tokens hold about three of these prompts)."""
    fleet = _fleet(2)
    matched: dict[str, int] = {}

    def remember(point: DecisionPoint) -> None:
        tokens = point.decision.attributes.get("prefix_match_tokens", 0)
        matched[point.request.request_id] = tokens if isinstance(tokens, int) else 0

    sim = Simulation(_trace(tmp_path, _reused_prefixes(60, 1.0)), fleet, _default_policy(fleet),
                     SimulationSettings(kv_events=True, num_gpu_blocks=64),
                     on_decision=remember)
    records = sim.run().records
    hits = [r.cached_tokens for r in records]
    assert sum(hits) > 0
    assert [matched[f"trace-{r.index}"] for r in records] == hits


def test_engines_hash_blocks_as_the_policys_producer_does(tmp_path: Path) -> None:
    routing_file = tmp_path / "routing.yaml"
    routing = yaml.safe_load((ROOT / "config" / "routing.yaml").read_text())
    routing["producers"] = [{"type": "blocks", "params": {"algo": "sha256_cbor", "seed": "7"}}]
    routing_file.write_text(yaml.safe_dump(routing))
    fleet = _fleet(1)
    policy = PolicyEngine.build(load_routing(routing_file), fleet, seed=0)
    sim = Simulation(_trace(tmp_path, _reused_prefixes(3, 0.5)), fleet, policy,
                     SimulationSettings(kv_events=True))
    config = sim.workers[0].engine.config
    assert (config.hash_algo, config.hash_seed, config.enable_kv_events) == (
        "sha256_cbor", "7", True)
    sim.run()
    assert sim.exact_index is not None and sim.exact_index.blocks("w0") > 0


def test_a_policy_without_block_hashes_runs_without_events(tmp_path: Path) -> None:
    fleet = _fleet(2)
    policy = PolicyEngine.build(routing_for("round-robin"), fleet, seed=0)
    sim = Simulation(_trace(tmp_path, _reused_prefixes(4, 0.5)), fleet, policy,
                     SimulationSettings(kv_events=True))
    assert sim.exact_index is None and not sim.settings.kv_events
    assert not any(w.engine.config.enable_kv_events for w in sim.workers)
    assert all(r.completed for r in sim.run().records)


def test_a_burst_sharing_a_new_prefix_finds_it_before_its_events_arrive(tmp_path: Path) -> None:
    """Requests sharing a prefix nobody caches yet, arriving together: the events of the
    first one's blocks come only after its prefill is scheduled, so without counting the
    unfinished requests' blocks the others see the prefix nowhere and spread."""
    rng = random.Random(5)
    rows: list[dict[str, object]] = []
    for burst in range(12):
        prefix = [rng.randrange(1, 50_000) for _ in range(4096)]
        rows += [{"arrival_s": 2.0 * burst + 0.005 * k, "output_tokens": 200,
                  "prompt_token_ids": prefix + [rng.randrange(1, 50_000) for _ in range(64)]}
                 for k in range(8)]
    fleet = _fleet(6)
    hit_share = {}
    for inflight in (True, False):
        routing = yaml.safe_load((ROOT / "config" / "routing.yaml").read_text())
        for scorer in routing["profiles"]["default"]["scorers"]:
            if scorer["type"] == "prefix":
                scorer["params"] = {"inflight_blocks": inflight}
        path = tmp_path / f"routing-{inflight}.yaml"
        path.write_text(yaml.safe_dump(routing))
        policy = PolicyEngine.build(load_routing(path), fleet, seed=0)
        records = Simulation(_trace(tmp_path, rows), fleet, policy,
                             SimulationSettings(kv_events=True)).run().records
        hit_share[inflight] = (sum(r.cached_tokens for r in records)
                               / sum(r.prompt_tokens for r in records))
    # every request of a burst but the first reuses the whole prefix on the first's worker
    assert hit_share[True] == pytest.approx(7 / 8 * 4096 / (4096 + 64))
    assert hit_share[False] < hit_share[True] - 0.05
