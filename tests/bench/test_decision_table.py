"""The A/B table of decision-time runs, from real ``bench.decision`` reports."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.decision import main as run_decision
from bench.decision_table import load_runs, main, table

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("decision")
    assert run_decision(["--routing", str(REPO_ROOT / "config" / "routing.yaml"),
                         "--workers", "8,20", "--decisions", "10", "--warmup", "3",
                         "--prompt-tokens", "128", "--index-blocks", "80",
                         "--out", str(out)]) == 0
    return out / "decision.json"


def test_runs_are_grouped_by_label_in_run_order_and_shown_per_fleet_size(
        tmp_path: Path, report: Path) -> None:
    data = json.loads(report.read_text())
    for label, run, scale in (("before", 2, 3.0), ("before", 1, 2.0), ("after", 1, 1.0)):
        scaled = {**data, "sizes": [{**size, "cpu_p50_us": size["cpu_p50_us"] * scale}
                                    for size in data["sizes"]]}
        (tmp_path / f"{label}-run{run}.json").write_text(json.dumps(scaled))
    (tmp_path / "notes.json").write_text("{}")          # not a run: ignored
    runs = load_runs(tmp_path)
    assert sorted(runs) == ["after", "before"] and len(runs["before"]) == 2
    text = table(runs, ["before", "after"])
    lines = text.splitlines()
    assert len(lines) == 2 + 4            # header, rule, 2 sizes x 2 labels
    p50 = {size["workers"]: size["cpu_p50_us"] for size in data["sizes"]}
    assert lines[2].startswith("| 128 | 8 | before | ")
    assert f"{p50[8] * 2:.0f} / {p50[8] * 3:.0f}" in lines[2]      # run 1, then run 2
    assert lines[3].startswith("| 128 | 8 | after | ")
    assert lines[4].startswith("| 128 | 20 | before | ")


def test_cli_prints_the_table_and_refuses_unknown_labels_and_empty_folders(
        tmp_path: Path, report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(report, tmp_path / "head-run1.json")
    assert main([str(tmp_path)]) == 0
    assert "| 128 | 20 | head |" in capsys.readouterr().out
    assert main([str(tmp_path), "--labels", "base"]) == 2
    assert "no runs labelled 'base' (found: head)" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty)]) == 2
    assert "no LABEL-runN.json files" in capsys.readouterr().err
    (tmp_path / "bad-run1.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"not a bench\.decision report"):
        load_runs(tmp_path)
    assert main([str(tmp_path)]) == 2
    assert "bad-run1.json: not a bench.decision report" in capsys.readouterr().err


def test_the_on_routed_column_appears_only_when_every_run_has_it(tmp_path: Path,
                                                                 report: Path) -> None:
    data = json.loads(report.read_text())
    without_pauses = {**data, "sizes": [
        {k: v for k, v in size.items() if k != "young_pause_p50_us"} for size in data["sizes"]]}
    (tmp_path / "new-run1.json").write_text(json.dumps(without_pauses))
    lines = table(load_runs(tmp_path)).splitlines()
    assert lines[0].endswith("| on_routed CPU p50 µs (runs) |")
    routed = {size["workers"]: size["routed_p50_us"] for size in data["sizes"]}
    assert lines[2].endswith(f"| {routed[8]:.0f} |")
    older = {**without_pauses, "sizes": [
        {k: v for k, v in size.items() if k != "routed_p50_us"}
        for size in without_pauses["sizes"]]}
    (tmp_path / "old-run1.json").write_text(json.dumps(older))
    assert "on_routed" not in table(load_runs(tmp_path))


def test_the_young_collections_column_appears_only_when_every_run_has_it(
        tmp_path: Path, report: Path) -> None:
    data = json.loads(report.read_text())
    paused = {**data, "sizes": [{**size, "young_pause_p50_us": 123.4 + size["workers"]}
                                for size in data["sizes"]]}
    (tmp_path / "new-run1.json").write_text(json.dumps(paused))
    lines = table(load_runs(tmp_path)).splitlines()
    assert lines[0].endswith("| on_routed CPU p50 µs (runs) | young collection CPU p50 µs "
                             "(runs) |")
    assert lines[2].endswith(f"| {data['sizes'][0]['routed_p50_us']:.0f} | 131 |")
    older = {**data, "sizes": [{k: v for k, v in size.items() if k != "young_pause_p50_us"}
                               for size in data["sizes"]]}
    (tmp_path / "old-run1.json").write_text(json.dumps(older))
    assert "young collection" not in table(load_runs(tmp_path))
