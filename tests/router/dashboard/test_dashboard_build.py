"""Dashboard JSON generation: committed files match the definitions; layout and variables."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from router.cli import main
from router.dashboard.cli import duration_s
from router.dashboard.definitions import DASHBOARDS
from router.dashboard.grafana import dashboard_json

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_committed_dashboards_match_the_definitions() -> None:
    assert main(["dashboard", "build", "--check",
                 "--out", str(REPO_ROOT / "config/grafana/dashboards")]) == 0


def test_outside_the_checkout_the_checkouts_dashboards_are_the_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """From another directory, build --check said the files were missing (and snapshot
    found no dashboards), though kvroute up finds the checkout's config/ from anywhere."""
    monkeypatch.chdir(tmp_path)
    assert main(["dashboard", "build", "--check"]) == 0
    (tmp_path / "config/grafana/dashboards").mkdir(parents=True)    # a folder here wins
    assert main(["dashboard", "build", "--check"]) == 1
    assert "missing" in capsys.readouterr().err


def test_the_docs_table_counts_each_dashboards_panels() -> None:
    """The table said 11 panels for the fleet dashboard after its twelfth was added."""
    import json
    import re

    table = dict(re.findall(r"^\| `(\w+\.json)` \| [^|]+ \| (\d+) \|$",
                            (REPO_ROOT / "docs/observability.md").read_text(), re.MULTILINE))
    committed = {path.name: str(len(json.loads(path.read_text())["panels"]))
                 for path in (REPO_ROOT / "config/grafana/dashboards").glob("*.json")}
    assert table == committed


def test_check_reports_missing_and_stale_files(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "build", "--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("missing (run kvroute dashboard build, or give --out): ")
    assert "out of date" not in err
    assert main(["dashboard", "build", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cost.json", "fleet.json",
                                                          "routing.json"]
    assert main(["dashboard", "build", "--check", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    (tmp_path / "fleet.json").write_text("{}\n")
    assert main(["dashboard", "build", "--check", "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"out of date (run kvroute dashboard build): {tmp_path / 'fleet.json'}")


def test_panels_tile_the_24_column_grid_without_overlap() -> None:
    for dashboard in DASHBOARDS:
        taken: set[tuple[int, int]] = set()
        for panel in dashboard_json(dashboard)["panels"]:
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24
            cells = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                     for y in range(pos["y"], pos["y"] + pos["h"])}
            assert not cells & taken, panel["title"]
            taken |= cells


def test_reference_lines_become_dashed_overrides() -> None:
    board = dashboard_json(DASHBOARDS[1])
    kv = next(p for p in board["panels"] if p["title"] == "KV cache usage per worker")
    [override] = kv["fieldConfig"]["overrides"]
    assert override["matcher"] == {"id": "byName", "options": "warning threshold"}
    assert kv["targets"][1]["expr"] == "kvroute:threshold:kv_usage_warning"


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30.0), ("15m", 900.0), ("1.5h", 5400.0),
                                                ("250ms", 0.25)])
def test_durations(text: str, seconds: float) -> None:
    assert duration_s(text) == seconds


def test_bad_duration_names_the_value() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration like 30s"):
        duration_s("soon")
