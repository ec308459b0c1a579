"""The decision-time benchmark runs end to end on a tiny configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.decision import main

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_decision_benchmark_writes_json_and_plot(tmp_path: Path) -> None:
    routing = REPO_ROOT / "config" / "examples" / "token-aware.yaml"
    code = main(["--routing", str(routing), "--workers", "8,40", "--decisions", "20",
                 "--warmup", "5", "--prompt-tokens", "256", "--index-blocks", "800",
                 "--out", str(tmp_path)])
    assert code == 0
    report = json.loads((tmp_path / "decision.json").read_text())
    assert [size["workers"] for size in report["sizes"]] == [8, 40]
    assert all(size["decisions"] == 20 for size in report["sizes"])
    assert all(0 < size["p50_us"] <= size["p99_us"] for size in report["sizes"])
    assert all(size["routed_p50_us"] > 0 for size in report["sizes"])   # the index learns
    memory = report["memory"]
    assert memory["blocks"] == 800
    assert memory["approximate_bytes_per_block"] > memory["exact_bytes_per_block"] > 0
    assert (tmp_path / "decision.png").stat().st_size > 0
    floor = report["machine_floor"]
    assert 0 < floor["p50_us"] <= floor["p99_us"]
    assert floor["p99_over_p50"] == floor["p99_us"] / floor["p50_us"]


def test_collections_that_start_inside_a_decision_are_counted(tmp_path: Path) -> None:
    import gc

    routing = REPO_ROOT / "config" / "routing.yaml"
    arguments = ["--routing", str(routing), "--workers", "8", "--decisions", "20",
                 "--warmup", "5", "--prompt-tokens", "256", "--index-blocks", "80"]
    arguments += ["--gc", "allocations"]       # where CPython starts them
    assert main([*arguments, "--out", str(tmp_path / "default")]) == 0
    default = json.loads((tmp_path / "default" / "decision.json").read_text())["sizes"][0]
    thresholds = gc.get_threshold()
    gc.set_threshold(1)            # a young collection at nearly every allocation
    try:
        assert main([*arguments, "--out", str(tmp_path / "eager")]) == 0
    finally:
        gc.set_threshold(*thresholds)
    eager = json.loads((tmp_path / "eager" / "decision.json").read_text())["sizes"][0]
    assert eager["collections_in_decide"] >= 20 > default["collections_in_decide"]
    # every collection of the timed window is timed, inside decide or not
    assert eager["young_collections"] + eager["older_collections"] >= eager[
        "collections_in_decide"]
    assert 0 < eager["young_pause_p50_us"] <= eager["young_pause_max_us"]


def test_the_loop_collector_runs_due_collections_between_decisions(tmp_path: Path) -> None:
    """``--gc loop`` (the router's way, ``router.collector``): with a young threshold of 1 a
    collection is due after every decision, and it runs there, never inside one."""
    import gc

    arguments = ["--routing", str(REPO_ROOT / "config" / "routing.yaml"), "--workers", "8",
                 "--decisions", "20", "--warmup", "5", "--prompt-tokens", "256",
                 "--index-blocks", "80", "--gc", "loop", "--out", str(tmp_path)]
    thresholds = gc.get_threshold()
    gc.set_threshold(1)
    try:
        assert main(arguments) == 0
        assert gc.get_threshold()[0] == 1           # given back
    finally:
        gc.set_threshold(*thresholds)
    report = json.loads((tmp_path / "decision.json").read_text())
    size = report["sizes"][0]
    assert report["gc_mode"] == "loop"
    assert size["collections_in_decide"] == 0
    assert size["young_collections"] + size["older_collections"] >= 20


def test_completed_requests_teach_the_estimator_its_correction(
        tmp_path: Path) -> None:
    """With ``--complete`` routed requests finish after their (perturbed) estimated times and
    reach ``on_completed``, so the estimator's online correction learns; without, it never
    does."""
    routing = REPO_ROOT / "config" / "routing.yaml"
    arguments = ["--routing", str(routing), "--workers", "8", "--decisions", "400",
                 "--warmup", "0", "--prompt-tokens", "256", "--index-blocks", "80"]
    assert main([*arguments, "--out", str(tmp_path / "held")]) == 0
    assert main([*arguments, "--complete", "--out", str(tmp_path / "complete")]) == 0
    held = json.loads((tmp_path / "held" / "decision.json").read_text())
    complete = json.loads((tmp_path / "complete" / "decision.json").read_text())
    assert held["complete"] is False and complete["complete"] is True
    held_size, complete_size = held["sizes"][0], complete["sizes"][0]
    assert held_size["completed"] == 0 and held_size["corrected"] is False
    assert 0 < complete_size["completed"] < 400 and complete_size["corrected"] is True
    assert held_size["held_incumbents"] > 0 and complete_size["held_incumbents"] > 0


def test_a_negative_observed_spread_is_refused(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--workers", "8", "--complete", "--observed-spread", "-1",
                 "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "--observed-spread: must be a finite number >= 0, got -1" in err
    assert not (tmp_path / "decision.json").exists()


def test_no_gc_keeps_collections_out_of_the_decisions_and_restores_the_collector(
        tmp_path: Path) -> None:
    import gc

    routing = REPO_ROOT / "config" / "routing.yaml"
    thresholds = gc.get_threshold()
    gc.set_threshold(1)            # a collection at nearly every allocation, unless disabled
    try:
        code = main(["--routing", str(routing), "--workers", "8", "--decisions", "20",
                     "--warmup", "5", "--prompt-tokens", "256", "--index-blocks", "80",
                     "--complete", "--no-gc", "--out", str(tmp_path)])
        assert gc.isenabled()
    finally:
        gc.set_threshold(*thresholds)
    assert code == 0
    report = json.loads((tmp_path / "decision.json").read_text())
    assert report["gc_enabled"] is False
    assert report["sizes"][0]["collections_in_decide"] == 0
    assert report["sizes"][0]["young_collections"] == 0
    assert report["sizes"][0]["older_collections"] == 0
