"""policies/latency/evaluate.py: the samples come from the profile's learning estimator."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from policies.latency.evaluate import collect, errors, evaluate, main, replay
from policies.latency.observer import LatencySample

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_every_finished_request_of_a_small_slice_gives_one_sample(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 200 * i, "input_length": 600 + 16 * i, "output_length": 12,
             "hash_ids": [0, i + 1]} for i in range(24)]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    samples = collect(str(trace), str(REPO_ROOT / "config" / "fleets" / "reference-h100.yaml"),
                      str(REPO_ROOT / "config" / "routing.yaml"), None, 1.0, seed=0)
    assert len(samples) == len(rows)          # recorded once each, by the learning plugin
    assert [s.arrival_s for s in samples] == sorted(s.arrival_s for s in samples)
    assert all(s.observed_ttft_s and s.observed_ttft_s > 0 and s.raw_ttft_s > 0
               for s in samples)
    assert [s.prompt_tokens for s in samples] == [row["input_length"] for row in rows]


def sample(index: int, raw_ttft: float, observed_ttft: float, raw_tpot: float,
           observed_tpot: float | None, corrected: float = 1.0) -> LatencySample:
    return LatencySample(
        arrival_s=float(index), gpu_class="H100-80GB", prompt_tokens=1000 + 10 * index,
        cached_tokens=0, output_tokens=64, inflight_prefill_tokens=index % 7,
        running=index % 5, waiting=0, inflight_requests=index % 5, kv_usage=0.1,
        raw_ttft_s=raw_ttft, raw_tpot_s=raw_tpot, ttft_s=raw_ttft * corrected,
        tpot_s=raw_tpot * corrected, observed_ttft_s=observed_ttft,
        observed_tpot_s=observed_tpot, worker_id="w1")


def test_errors_are_the_mean_log_ratio_and_the_median_percentage() -> None:
    report = errors([2.0, 0.5, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0])     # a 0 prediction is left out
    assert report["n"] == 3.0
    assert report["mean_abs_log"] == pytest.approx(2 * math.log(2) / 3)
    assert report["median_ape"] == pytest.approx(0.5)                # of 1.0, 0.5, 0.0
    empty = errors([0.0], [1.0])
    assert empty["n"] == 0.0 and math.isnan(empty["mean_abs_log"])


def test_evaluate_scores_every_estimator_on_the_requests_after_the_cut() -> None:
    # the model is always half the observed TTFT; the online correction learnt the factor 2
    samples = [sample(i, 0.1 + 0.01 * i, 2 * (0.1 + 0.01 * i), 0.02, 0.03 if i % 4 else None,
                      corrected=2.0) for i in range(40)]
    report = evaluate(samples, train_share=0.75, seed=0)
    assert (report["train"], report["test"]) == (30, 10)
    ttft = report["ttft"]
    assert ttft["raw_model"]["n"] == 10.0
    assert ttft["raw_model"]["mean_abs_log"] == pytest.approx(math.log(2))
    assert ttft["online_corrected"]["mean_abs_log"] == pytest.approx(0.0, abs=1e-12)
    # log(observed) = log(raw) + log 2 is a feature plus a constant: the linear fit is exact
    assert ttft["sklearn_linear"]["mean_abs_log"] == pytest.approx(0.0, abs=1e-6)
    assert "sklearn_gbr" in ttft and ttft["sklearn_gbr"]["predict_10_rows_us"] > 0
    # requests without an observed TPOT (one output token) are left out of the TPOT scores
    assert report["tpot"]["raw_model"]["n"] == sum(1 for s in samples[30:] if s.observed_tpot_s)


def test_too_few_finished_requests_skip_the_trained_models() -> None:
    report = evaluate([sample(i, 0.1, 0.2, 0.02, 0.03) for i in range(10)], 0.5, seed=0)
    assert set(report["ttft"]) == {"raw_model", "online_corrected", "online_per_worker",
                                   "online_per_regime", "online_judged"}


def test_main_writes_the_report_and_refuses_a_bad_share(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 150 * i, "input_length": 500 + 12 * i, "output_length": 8 + i % 5,
             "hash_ids": [0, i + 1]} for i in range(40)]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "out"
    assert main(["--trace", str(trace),
                 "--fleet", str(REPO_ROOT / "config" / "fleets" / "reference-h100.yaml"),
                 "--routing", str(REPO_ROOT / "config" / "routing.yaml"),
                 "--limit", "40", "--out", str(out)]) == 0
    report = json.loads((out / "latency_eval.json").read_text())
    assert (report["train"], report["test"]) == (28, 12)
    assert report["ttft"]["raw_model"]["n"] == 12.0
    assert "ttft online_corrected" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["--trace", str(trace), "--train", "1.5", "--out", str(out)])
    assert exit_info.value.code == 2
    assert "--train must be between 0 and 1" in capsys.readouterr().err


def test_replay_learns_only_from_requests_finished_before_each_arrival() -> None:
    """Every request three times later than the model says, each finishing 0.3 s after it
    arrives, one arriving every 0.125 s: the first three are predicted before any outcome
    (the model's raw numbers); later ones from the outcomes in by then."""
    samples = [dataclasses.replace(sample(i, 0.1, 0.3, 0.01, None), arrival_s=0.125 * i)
               for i in range(60)]
    for regimes in (False, True):
        predicted = replay(samples, regimes)
        assert [ttft for ttft, _ in predicted[:3]] == [0.1, 0.1, 0.1]
        assert predicted[3][0] == pytest.approx(0.3)       # r0's outcome is in at 0.3 s
        assert predicted[-1][0] == pytest.approx(0.3)


def test_the_per_regime_replay_predicts_a_regime_dependent_error_better() -> None:
    """Short prefills (96 tokens) three times late, long ones (8,000) on time, alternating
    on one worker: one factor per worker splits the difference, per regime each is learnt."""
    samples = []
    for i in range(200):
        short = i % 2 == 0
        raw = 0.02 if short else 0.5
        row = sample(i, raw, raw * (3.0 if short else 1.0), 0.01, 0.01)
        samples.append(dataclasses.replace(row, prompt_tokens=96 if short else 8_000,
                                           inflight_prefill_tokens=0))
    ttft = evaluate(samples, train_share=0.5, seed=0)["ttft"]
    assert ttft["online_per_regime"]["mean_abs_log"] < 0.05
    assert ttft["online_per_worker"]["mean_abs_log"] > 0.3
