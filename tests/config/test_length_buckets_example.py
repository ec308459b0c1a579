"""config/examples/length-buckets.yaml: each prompt-length bucket routes into its own pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.base import RoutingRequest
from policies.engine import PolicyEngine
from policies.loader import load_routing
from workers.fleet import load_fleet
from workers.models import WorkerView

ROOT = Path(__file__).resolve().parents[2]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def idle_views() -> list[WorkerView]:
    fleet = load_fleet(ROOT / "config" / "fleets" / "bench-mixed.yaml")
    return [WorkerView(info=spec.info, running=0, waiting=0, kv_usage=0.0, block_size=16,
                       num_gpu_blocks=20_000, max_model_len=131_072, inflight_requests=0,
                       inflight_tokens=0, healthy=True, staleness_s=0.1,
                       served_models=(MODEL,))
            for spec in fleet.workers]


@pytest.mark.parametrize(("prompt_tokens", "rule", "pool"), [
    (1, "short-prompts", "economy"),
    (2048, "short-prompts", "economy"),
    (2049, "medium-prompts", "standard"),
    (8192, "medium-prompts", "standard"),
    (8193, "long-prompts", "premium"),
    (100_000, "long-prompts", "premium"),
])
def test_each_bucket_picks_a_worker_of_its_pool(prompt_tokens: int, rule: str,
                                                pool: str) -> None:
    fleet = load_fleet(ROOT / "config" / "fleets" / "bench-mixed.yaml")
    engine = PolicyEngine.build(load_routing(ROOT / "config" / "examples" / "length-buckets.yaml"),
                                fleet)
    views = idle_views()
    pools = {view.info.id: view.info.labels["pool"] for view in views}
    tokens = list(range(prompt_tokens))
    request = RoutingRequest(request_id="r", model=MODEL, path="/v1/completions",
                             prompt=tokens, max_tokens=16)
    request.prompt_token_ids = tokens
    request.num_prompt_tokens = prompt_tokens
    for producer in engine.producers:
        if producer.name != "tokens":
            producer.produce(request, views)
    decision = engine.decide(request, views)
    assert decision.rule == rule
    assert decision.worker_id is not None and pools[decision.worker_id] == pool
