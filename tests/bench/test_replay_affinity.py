"""Live prefix affinity: the token-aware default against round-robin, through ``kvroute up``.

Twelve tenants, each with its own 3,072-token prefix (six Mooncake-style 512-token blocks)
and a 256-token unique tail, send two requests each: every tenant once in a seeded random
order, then every tenant again in another. Four emulated H100 workers hold every prefix with
room to spare, so a miss is a first visit of a tenant to a worker. Round-robin sends a
tenant's second request to the worker of its first only when the two are a multiple of four
requests apart (4 of the 12 tenants with this seed); routing by cached prefix sends all
twelve back. The workers' own ``vllm:prefix_cache_hits`` / ``queries`` must show it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bench.replay import ReplayConfig, run_replay
from workers.ports import free_port

pytestmark = pytest.mark.integration

TENANTS = 12
WORKERS = 4
PREFIX_BLOCKS = 6
TAIL_TOKENS = 256
SPACING_S = 0.25            # wall seconds between arrivals: each prefill ends before the next


def _write_trace(path: Path, seed: int = 0) -> None:
    rng = random.Random(seed)
    rounds = []
    for _ in range(2):
        order = list(range(TENANTS))
        rng.shuffle(order)
        rounds += order
    rows = []
    for index, tenant in enumerate(rounds):
        hash_ids = [1000 * (tenant + 1) + k for k in range(PREFIX_BLOCKS)] + [100_000 + index]
        rows.append({"timestamp": int(index * SPACING_S * 1000),
                     "input_length": PREFIX_BLOCKS * 512 + TAIL_TOKENS,
                     "output_length": 4, "hash_ids": hash_ids})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _write_fleet(path: Path) -> None:
    workers = "".join(
        f"  - id: h100-{i}\n    gpu: h100\n    models: [meta-llama/Llama-3.1-8B-Instruct]\n"
        f"    emulate: {{port: {free_port()}}}\n" for i in range(WORKERS))
    path.write_text("gpu_classes:\n  h100: {price_per_hour: 3.00}\nmodels:\n"
                    "  meta-llama/Llama-3.1-8B-Instruct:\n    arch: llama-3.1-8b\n"
                    f"workers:\n{workers}")


@pytest.mark.timeout(240)
def test_token_aware_hit_rate_is_at_least_twice_round_robin(tmp_path: Path) -> None:
    trace, fleet = tmp_path / "tenants.jsonl", tmp_path / "fleet.yaml"
    _write_trace(trace)
    _write_fleet(fleet)
    config = ReplayConfig(trace=trace, targets=("kvroute", "kvroute-rr"), fleet=fleet,
                          limit=2 * TENANTS, time_scale=0.1, launch="up")
    messages: list[str] = []
    token_aware, round_robin = run_replay(config, messages.append)
    for result in (token_aware, round_robin):
        assert (result.skipped, result.requests, result.completed, result.errors) == (
            None, 2 * TENANTS, 2 * TENANTS, 0), messages
        assert result.prefix_hit_rate is not None
    assert any("kvroute up with 4 emulated workers" in m for m in messages)
    assert round_robin.prefix_hit_rate is not None and token_aware.prefix_hit_rate is not None
    # all twelve second visits hit their prefix: about 12 x 3072 of 24 x 3328 prompt tokens
    assert token_aware.prefix_hit_rate > 0.35, (token_aware, round_robin)
    assert token_aware.prefix_hit_rate >= 2 * round_robin.prefix_hit_rate, (
        token_aware, round_robin)
    # the router's own counters: it knew of the second visits' prefixes and kept them;
    # round-robin has no prefix plugin, so nothing to say
    chosen, best = token_aware.router_known_chosen_share, token_aware.router_known_best_share
    assert chosen is not None and best is not None and 0.35 < chosen <= best, token_aware
    assert round_robin.router_known_best_share is None
