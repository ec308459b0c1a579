from __future__ import annotations

import random

from policies.base import CandidateScore, CycleState
from policies.peers.dynamo_kv import DynamoKvCostScorer, DynamoKvParams
from policies.peers.llm_d import chained_block_hashes
from policies.peers.softmax_picker import SoftmaxParams, SoftmaxPicker
from tests.policies.peers.peer_fixtures import MODEL, make_request, make_view, routed

PROMPT = list(range(160))          # 10 blocks of 16


def _with_overlaps(scorer: DynamoKvCostScorer, overlaps: dict[str, int]) -> None:
    hashes = chained_block_hashes(MODEL, PROMPT, 16, max_blocks=1 << 30)
    for worker, blocks in overlaps.items():
        scorer.indexer.record(worker, hashes[:blocks], now=0.0)


def test_cost_is_uncached_prefill_plus_active_blocks() -> None:
    scorer = DynamoKvCostScorer()
    _with_overlaps(scorer, {"a": 2, "b": 5, "c": 8})
    views = [make_view("a"), make_view("b"), make_view("c")]
    request = make_request("r1", tokens=PROMPT, at=1.0)
    # (10 - overlap) prefill blocks + 10 blocks the sequence will hold
    assert scorer.costs(request, views) == {"a": 18.0, "b": 15.0, "c": 12.0}
    assert scorer.score(request, views, CycleState()) == {"a": 0.0, "b": 0.5, "c": 1.0}


def test_routed_requests_add_active_load_until_they_complete() -> None:
    scorer = DynamoKvCostScorer()
    _with_overlaps(scorer, {"a": 2, "b": 5, "c": 8})
    views = [make_view("a"), make_view("b"), make_view("c")]
    scorer.costs(make_request("probe", tokens=[1]), views)     # learns block sizes
    busy = make_request("busy", tokens=range(1000, 1064), at=1.0)   # 4 blocks, nothing cached
    scorer.on_routed(busy, routed(busy, "c"))
    assert scorer.active_blocks("c") == (4.0, 4)
    request = make_request("r1", tokens=PROMPT, at=2.0)
    # c: (4 + 10 - 8) + (4 + 10) = 20 > b's 15
    assert scorer.costs(request, views)["c"] == 20.0
    scorer.on_completed(busy, None)  # type: ignore[arg-type]
    assert scorer.active_blocks("c") == (0.0, 0)
    assert scorer.costs(request, views)["c"] == 12.0


def test_overlap_credit_scales_and_blocks_expire_after_the_ttl() -> None:
    scorer = DynamoKvCostScorer(DynamoKvParams(overlap_score_credit=0.5, ttl_secs=120))
    _with_overlaps(scorer, {"a": 8})
    views = [make_view("a")]
    assert scorer.costs(make_request(tokens=PROMPT, at=119.0), views) == {"a": 16.0}  # 6 + 10
    assert scorer.costs(make_request(tokens=PROMPT, at=120.0), views) == {"a": 20.0}  # expired


def test_softmax_picker_temperature_zero_is_argmax_and_warm_samples_all() -> None:
    candidates = [CandidateScore("a", 0.0, {}), CandidateScore("b", 1.0, {}),
                  CandidateScore("c", 0.5, {})]
    cold = SoftmaxPicker(SoftmaxParams(0.0), random.Random(1))
    assert {cold.pick(make_request(), candidates, CycleState()).worker_id
            for _ in range(20)} == {"b"}
    warm = SoftmaxPicker(SoftmaxParams(1.0), random.Random(1))
    picks = [warm.pick(make_request(), candidates, CycleState()).worker_id for _ in range(3000)]
    # P ∝ e^0, e^1, e^0.5 → 0.186, 0.506, 0.307
    assert abs(picks.count("b") / 3000 - 0.506) < 0.04
    assert abs(picks.count("a") / 3000 - 0.186) < 0.04
