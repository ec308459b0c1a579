"""The compact doc tables come from summary.json, column for column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.doc_tables import header_line, main, table

SUMMARY = {
    "trace": {"requests": 500, "rate_scale": 1.0, "prefix_hit_ceiling": 0.164,
              "prefix_hit_ceiling_pooled": 0.132},
    "policies": {
        "rr": {"slo_attainment": 0.322, "goodput_rate_scale": 0.0, "prefix_hit_rate": 0.053,
               "ttft_p99": 36.06, "tpot_p99": 0.2325, "cost_per_mtok_busy": 0.109,
               "goodput_probes": [[1.0, 0.322], [0.5, 0.462]],
               "goodput_cost_per_mtok_busy": None},
        "ta": {"slo_attainment": 0.822, "goodput_rate_scale": 0.625, "prefix_hit_rate": 0.059,
               "ttft_p99": 17.53, "tpot_p99": 0.0895, "cost_per_mtok_busy": 0.093,
               "goodput_probes": [[1.0, 0.822], [0.5, 0.922], [0.625, 0.906]],
               "goodput_cost_per_mtok_busy": 0.0871}},
}


def test_rate_layout() -> None:
    lines = table(SUMMARY, "rate").splitlines()
    assert lines[0] == ("| policy | SLO met | goodput ×rate | prefix hit | TTFT p99 s | "
                        "TPOT p99 ms | $/Mtok busy | $/Mtok busy at goodput |")
    assert lines[2] == "| rr | 32.2% | 0.00 | 5.3% | 36.06 | 232 | 0.109 | – |"
    plain = {**SUMMARY, "policies": {"rr": {"slo_attainment": 0.5}}}
    assert table(plain, "rate").splitlines()[0].endswith("| $/Mtok busy |")


def test_goodput_layout_lists_probes_highest_scale_first() -> None:
    lines = table(SUMMARY, "goodput").splitlines()
    assert lines[3] == ("| ta | 82.2% | 0.62 | ×1 82.2%, ×0.625 90.6%, ×0.5 92.2% | 5.9% | "
                        "0.093 | 0.087 |")
    assert lines[2].endswith("| 0.109 | – |")


def test_prefix_layout_splits_prompt_tokens_and_hits_by_gpu_class() -> None:
    summary = {
        "fleet": {"workers": [{"id": "h0", "gpu": "h100"}, {"id": "h1", "gpu": "h100"},
                              {"id": "a0", "gpu": "a100"}]},
        "policies": {"ta": {"slo_attainment": 0.9, "prefix_hit_rate": 0.085,
                            "prefix_cached_chosen": 0.0846, "prefix_cached_anywhere": 0.096,
                            "prefix_passed_over_by_term": {"load": 0.006, "slo-fallback": 0.003,
                                                           "price": 0.0004, "prefix": 0.0005,
                                                           "protect-decodes": 0.0004},
                            "prompt_tokens_per_worker": {"h0": 500, "h1": 300, "a0": 200},
                            "cached_tokens_per_worker": {"h0": 10, "h1": 30, "a0": 60}},
                     "old": {"slo_attainment": 0.5, "prefix_hit_rate": 0.05}}}
    lines = table(summary, "prefix").splitlines()
    assert lines[0] == ("| policy | SLO met | prefix hit | cached on the chosen worker | "
                        "cached anywhere | passed over, by deciding term | "
                        "prompt tokens (hit rate) by GPU class |")
    assert lines[2] == ("| ta | 90.0% | 8.5% | 8.5% | 9.6% | load 0.6%, slo-fallback 0.3%, "
                        "price <0.1%, others 0.1% | h100 80% (5.0%), a100 20% (30.0%) |")
    assert lines[3] == "| old | 50.0% | 5.0% | – | – | – | – |"     # a summary from before


def test_header_names_both_ceilings_and_old_summaries_still_render() -> None:
    assert header_line(SUMMARY) == ("500 requests at rate scale 1.0; infinite-cache prefix "
                                    "ceiling 16.4%, one LRU cache of the whole fleet's KV "
                                    "13.2%.")
    old = {"trace": {"requests": 10, "rate_scale": 0.5, "prefix_hit_ceiling": 0.2},
           "policies": {}}
    assert header_line(old) == ("10 requests at rate scale 0.5; infinite-cache prefix "
                                "ceiling 20.0%.")


def test_cli_prints_and_refuses_bad_files(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(SUMMARY))
    assert main([str(path), "--layout", "goodput"]) == 0
    assert "| ta | 82.2% | 0.62 |" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown layout"):
        table(SUMMARY, "wide")


def test_changes_from_an_earlier_run_show_each_figure_that_moved(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    earlier = {**SUMMARY, "policies": {
        "rr": {**SUMMARY["policies"]["rr"], "preemptions": 62},
        "ta": {**SUMMARY["policies"]["ta"], "preemptions": 0},
        "gone": {"preemptions": 1}}}
    later = {**SUMMARY, "policies": {
        "rr": {**SUMMARY["policies"]["rr"], "preemptions": 4, "slo_attainment": 0.321},
        "ta": {**SUMMARY["policies"]["ta"], "preemptions": 0}}}
    (tmp_path / "old.json").write_text(json.dumps(earlier))
    (tmp_path / "new.json").write_text(json.dumps(later))
    assert main([str(tmp_path / "new.json"), "--against", str(tmp_path / "old.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == ("| policy | preemptions | SLO met | goodput ×rate | "
                        "$/Mtok busy (at goodput) |")
    assert lines[4:] == ["| rr | 62 → 4 | 32.2% → 32.1% | 0.00 | 0.109 |",
                         "| ta | 0 | 82.2% | 0.62 | 0.087 |"]


def test_changes_between_runs_of_different_workloads_say_so_first(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    earlier = {**SUMMARY, "trace": {**SUMMARY["trace"], "name": "azure.csv"}}
    later = {**SUMMARY, "trace": {**SUMMARY["trace"], "name": "mooncake.jsonl.gz",
                                  "requests": 200}}
    (tmp_path / "old.json").write_text(json.dumps(earlier))
    (tmp_path / "new.json").write_text(json.dumps(later))
    assert main([str(tmp_path / "new.json"), "--against", str(tmp_path / "old.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == ("The two runs are not of the same workload (name azure.csv → "
                        "mooncake.jsonl.gz, requests 500 → 200): the changes below are not "
                        "the code's alone.")
    assert lines[4].startswith("| policy | preemptions |")
