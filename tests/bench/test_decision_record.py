"""The token-aware default profile decides exactly as recorded on a seeded fleet and workload.

``tests/bench/data/token_aware_decisions.json`` holds the worker, reason and attributes of
every decision of ``config/routing.yaml`` on seeded synthetic fleets of 10, 64 and 1,000
workers (idle workers included, so that ties occur), with views changing between decisions
and outcomes fed back so that the online correction and its 90th percentile take part.
Speed-ups of the decision path must reproduce it exactly. Regenerate (only for an intended
change of behaviour) with ``python tests/bench/test_decision_record.py``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
RECORD = Path(__file__).resolve().parent / "data" / "token_aware_decisions.json"
SIZES = {10: 240, 64: 120, 1000: 60}


def record_decisions(size: int, decisions: int, seed: int = 7) -> list[dict[str, Any]]:
    from dataclasses import replace

    from bench.decision import MODEL, synthetic_fleet, synthetic_views
    from policies.base import RequestOutcome, RoutingRequest
    from policies.engine import PolicyEngine
    from policies.loader import load_routing

    rng = random.Random(seed * 1000 + size)
    fleet = synthetic_fleet(size)
    engine = PolicyEngine.build(load_routing(REPO_ROOT / "config" / "routing.yaml"), fleet,
                                seed=seed)
    views = synthetic_views(fleet, rng)
    for i in range(0, size, 2):     # half idle: equal estimates, ties to break
        views[i] = replace(views[i], running=0, waiting=0, inflight_requests=0,
                           inflight_prefill_tokens=0, inflight_tokens=0, kv_usage=0.0)
    prefixes = [[rng.randrange(50_000) for _ in range(rng.choice((64, 512, 1500)))]
                for _ in range(12)]
    out: list[dict[str, Any]] = []
    for n in range(decisions):
        changed = rng.randrange(size)
        views[changed] = replace(views[changed], running=rng.randint(0, 120),
                                 waiting=rng.randint(0, 20),
                                 inflight_prefill_tokens=rng.randint(0, 9_000))
        tokens = rng.choice(prefixes) + [rng.randrange(50_000)
                                         for _ in range(rng.randint(1, 3000))]
        request = RoutingRequest(request_id=f"r{n}", model=MODEL, path="/v1/completions",
                                 prompt=tokens,
                                 max_tokens=rng.choice((None, 8, 128, 1024)),
                                 arrival_time=n * rng.choice((0.001, 0.05, 0.5)))
        request.prompt_token_ids = tokens
        request.num_prompt_tokens = len(tokens)
        for producer in engine.producers:
            if producer.name != "tokens":
                producer.produce(request, views)
        decision = engine.decide(request, views)
        engine.on_routed(request, decision)
        attributes = dict(decision.attributes)
        out.append({"worker": decision.worker_id, "reason": decision.reason,
                    "attributes": {k: attributes[k] for k in sorted(attributes)}})
        if decision.worker_id is not None and rng.random() < 0.7:
            ttft = attributes.get("estimated_ttft_s", 0.1) * rng.uniform(0.5, 3.0)
            tpot = attributes.get("estimated_tpot_s", 0.02) * rng.uniform(0.5, 2.0)
            engine.on_completed(request, RequestOutcome(
                request_id=request.request_id, worker_id=decision.worker_id, status=200,
                prompt_tokens=len(tokens), ttft_s=ttft, tpot_s=tpot))
    return out


def test_decisions_match_the_record() -> None:
    recorded = json.loads(RECORD.read_text())
    for size, decisions in SIZES.items():
        expected = recorded[str(size)]
        actual = json.loads(json.dumps(record_decisions(size, decisions)))
        assert len(actual) == len(expected) == decisions
        for n, (got, want) in enumerate(zip(actual, expected, strict=True)):
            assert got == want, f"{size} workers, decision {n}"


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    RECORD.write_text(json.dumps({str(size): record_decisions(size, count)
                                  for size, count in SIZES.items()}, indent=1) + "\n")
