"""Report files: summary.json round trip, Markdown table cells, plots written."""

from __future__ import annotations

import json
from pathlib import Path

from sim.report import markdown_table, prediction_table, write_plots, write_summary

ENTRY = {"requests": 10, "rejected": 1, "ttft_p50": 0.1234, "ttft_p90": 0.5, "ttft_p99": 1.0,
         "tpot_p50": 0.0125, "tpot_p99": 0.05, "e2e_p50": 2.0, "e2e_p99": 3.0,
         "slo_attainment": 0.9, "goodput_rate_scale": None, "prefix_hit_rate": 0.25,
         "prefix_cached_anywhere": 0.375,
         "cost_per_mtok_fleet": 1.5, "cost_per_mtok_busy": 0.75, "throughput_tok_s": 12345.6}


def test_markdown_table_formats_units() -> None:
    table = markdown_table({"rr": ENTRY})
    row = table.splitlines()[2]
    assert row.startswith("| rr | 10 | 1 | 0.123 | 0.500 | 1.000 | 12.5 | 50.0 | 2.00 | 3.00 "
                          "| 90.0% | – | 25.0% | 37.5% | 1.500 | 0.750 | 12,346 |")


def test_summary_and_plots_are_written(tmp_path: Path) -> None:
    meta = {"trace": {"name": "t", "requests": 10, "rate_scale": 1.0,
                      "prefix_hit_ceiling": 0.3}, "fleet": {"source": "f.yaml"}}
    path = write_summary(tmp_path, meta, {"rr": ENTRY, "ll": ENTRY})
    data = json.loads(path.read_text())
    assert list(data["policies"]) == ["rr", "ll"]
    assert data["policies"]["rr"]["ttft_p50"] == 0.1234
    assert not (tmp_path / "summary.json.partial").exists()    # written whole, then renamed
    assert "30.0%" in (tmp_path / "summary.md").read_text()
    written = write_plots(tmp_path, data["policies"], {"rr": [0.1, 0.2], "ll": [0.3]})
    assert [p.name for p in written] == ["ttft_cdf.png", "goodput.png", "cost.png"]
    assert all(p.stat().st_size > 5000 for p in written)


def test_goodput_runs_add_the_cost_at_the_goodput_rate() -> None:
    assert "at goodput" not in markdown_table({"rr": ENTRY})
    searched = {**ENTRY, "goodput_rate_scale": 1.5, "goodput_cost_per_mtok_busy": 0.0625}
    table = markdown_table({"rr": ENTRY, "ta": searched}).splitlines()
    assert table[0].endswith("| tok/s | $/Mtok busy at goodput |")
    assert table[2].endswith("| 12,346 | – |")          # a policy without a passing scale
    assert table[3].endswith("| 1.50 | 25.0% | 37.5% | 1.500 | 0.750 | 12,346 | 0.062 |")


def test_the_header_names_the_pooled_cache_ceiling(tmp_path: Path) -> None:
    meta = {"trace": {"name": "t", "requests": 10, "rate_scale": 1.0,
                      "prefix_hit_ceiling": 0.3, "prefix_hit_ceiling_pooled": 0.125},
            "fleet": {"source": "f.yaml"}}
    write_summary(tmp_path, meta, {"rr": ENTRY})
    assert ("infinite-cache prefix ceiling 30.0% (one LRU cache of the whole fleet's KV: "
            "12.5%);") in (tmp_path / "summary.md").read_text()


def test_the_summary_shows_the_policies_output_length_predictions(tmp_path: Path) -> None:
    predicted = {**ENTRY, "output_prediction": {
        "predicted": 90, "share_of_completed": 0.9, "ratio_p10": 0.25, "ratio_p50": 1.04,
        "ratio_p90": 3.5, "within_2x": 0.6}}
    assert prediction_table({"rr": ENTRY}) == ""
    meta = {"trace": {"name": "t", "requests": 10, "rate_scale": 1.0}, "fleet": {}}
    write_summary(tmp_path, meta, {"rr": {**ENTRY, "output_prediction": None},
                                   "kvroute": predicted})
    lines = (tmp_path / "summary.md").read_text().splitlines()
    assert lines[-1] == "| kvroute | 90 (90%) | 0.25 | 1.04 | 3.50 | 60% |"
    # rr predicted nothing: its one row is the main table's
    assert sum(line.startswith("| rr |") for line in lines) == 1


def test_a_goodput_search_that_never_failed_shows_its_scale_as_a_bound() -> None:
    from sim.report import markdown_table

    table = markdown_table({"rr": {**ENTRY, "goodput_rate_scale": 64.0, "goodput_capped": True},
                            "ll": {**ENTRY, "goodput_rate_scale": 2.5, "goodput_capped": False}})
    assert "| ≥ 64.00 |" in table and "| 2.50 |" in table
