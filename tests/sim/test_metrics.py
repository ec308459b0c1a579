"""Summary fields computed from hand-made request records."""

from __future__ import annotations

import pytest

from sim.metrics import RequestRecord, WorkerUsage, allocate_costs, slo_ttft_target, summarize


def _done(index: int, worker: str, ttft: float, tpot: float | None, finished: float,
          prompt: int = 1000, cached: int = 0, output: int = 11) -> RequestRecord:
    return RequestRecord(index=index, arrival_s=0.0, prompt_tokens=prompt, output_tokens=output,
                         slo_ttft_s=0.5, worker_id=worker, ttft_s=ttft, tpot_s=tpot,
                         e2e_s=finished, queue_s=0.0, cached_tokens=cached,
                         finished_s=finished)


def test_slo_target_is_floor_or_three_prefills() -> None:
    assert slo_ttft_target(0.1) == 0.5
    assert slo_ttft_target(0.2) == pytest.approx(0.6)


def test_summary_counts_costs_and_hit_rate() -> None:
    records = [
        _done(0, "a", ttft=0.1, tpot=0.02, finished=1.0, cached=500),
        _done(1, "b", ttft=0.7, tpot=0.02, finished=2.0),            # TTFT misses
        _done(2, "a", ttft=0.2, tpot=0.06, finished=4.0),            # TPOT misses
        RequestRecord(index=3, arrival_s=0.0, prompt_tokens=10, output_tokens=1,
                      slo_ttft_s=0.5, reject_reason="no candidate"),
    ]
    usage = [WorkerUsage("a", "H100", 3.6, busy_s=2.0), WorkerUsage("b", "L40S", 1.8, busy_s=1.0)]
    allocate_costs(records, usage)
    s = summarize("p", records, usage, prefix_ceiling=0.4, rate_scale=1.0)
    assert (s["requests"], s["completed"], s["rejected"]) == (4, 3, 1)
    assert s["slo_attainment"] == 0.25
    assert s["prefix_hit_rate"] == pytest.approx(500 / 3000)
    assert s["prefix_hit_ceiling"] == 0.4
    assert s["makespan_s"] == 4.0
    served = 3000 + 33
    assert s["throughput_tok_s"] == pytest.approx(served / 4.0)
    fleet_cost = (3.6 + 1.8) * 4.0 / 3600         # everything billed over the makespan
    busy_cost = (3.6 * 2.0 + 1.8 * 1.0) / 3600    # billed only while busy
    assert s["cost_per_mtok_fleet"] == pytest.approx(fleet_cost / served * 1e6)
    assert s["cost_per_mtok_busy"] == pytest.approx(busy_cost / served * 1e6)
    assert s["ttft_p50"] == pytest.approx(0.2)
    assert s["requests_per_worker"] == {"a": 2, "b": 1}
    # worker a's busy cost splits by computed tokens: 511 vs 1011
    a_cost = 3.6 * 2.0 / 3600
    assert records[0].cost_usd == pytest.approx(a_cost * 511 / 1522)
    assert records[2].cost_usd == pytest.approx(a_cost * 1011 / 1522)
    assert records[1].cost_usd == pytest.approx(1.8 / 3600)
    assert records[3].cost_usd == 0.0


def test_single_token_outputs_have_no_tpot_and_can_meet_slo() -> None:
    record = _done(0, "a", ttft=0.3, tpot=None, finished=0.3, output=1)
    assert record.meets_slo


def test_prefix_passed_over_is_split_by_deciding_term() -> None:
    def routed(index: int, term: str, here: int, anywhere: int) -> RequestRecord:
        return RequestRecord(index=index, arrival_s=0.0, prompt_tokens=1000, output_tokens=2,
                             slo_ttft_s=0.5, worker_id="w0", ttft_s=0.1, tpot_s=0.01,
                             e2e_s=0.2, finished_s=0.2, decided_by=term,
                             cached_here_tokens=here, cached_anywhere_tokens=anywhere)

    records = [routed(0, "load", 0, 512), routed(1, "prefix", 512, 512),
               routed(2, "slo-fallback", 0, 128), routed(3, "load", 256, 512)]
    entry = summarize("p", records, [], 0.5, 1.0)
    assert entry["prefix_cached_anywhere"] == 1664 / 4000
    assert entry["prefix_cached_chosen"] == 768 / 4000
    assert entry["prefix_passed_over_by_term"] == {"load": 768 / 4000,
                                                   "slo-fallback": 128 / 4000}
    assert list(entry["prefix_passed_over_by_term"]) == ["load", "slo-fallback"]


def test_output_prediction_compares_generated_with_predicted() -> None:
    usage = [WorkerUsage("a", "H100", 3.6, busy_s=1.0)]
    outputs_and_predictions = [(10, 10), (10, 40), (30, 10), (8, 10), (5, None)]
    records = []
    for i, (output, predicted) in enumerate(outputs_and_predictions):
        record = _done(i, "a", ttft=0.1, tpot=0.02, finished=1.0, output=output)
        record.predicted_output_tokens = predicted
        records.append(record)
    rejected = RequestRecord(index=9, arrival_s=0.0, prompt_tokens=10, output_tokens=7,
                             slo_ttft_s=0.5, reject_reason="no candidate",
                             predicted_output_tokens=7)
    s = summarize("p", [*records, rejected], usage, prefix_ceiling=0.0, rate_scale=1.0)
    prediction = s["output_prediction"]
    # ratios generated / predicted of the completed requests with a prediction: 1, 0.25, 3, 0.8
    assert prediction["predicted"] == 4
    assert prediction["share_of_completed"] == pytest.approx(4 / 5)
    assert prediction["ratio_p50"] == pytest.approx(0.9)
    assert prediction["ratio_p10"] == pytest.approx(0.25 + 0.3 * (0.8 - 0.25))
    assert prediction["ratio_p90"] == pytest.approx(1.0 + 0.7 * (3.0 - 1.0))
    assert prediction["within_2x"] == pytest.approx(2 / 4)      # 1 and 0.8
    assert summarize("p", records[4:], usage, 0.0, 1.0)["output_prediction"] is None
