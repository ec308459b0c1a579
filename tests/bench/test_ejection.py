"""``bench.ejection``: through a real ``kvroute up`` per setting, a stalled worker times out
fewer requests with both protections than with ejection alone, and fewer with that than with
neither; the counts add up, and everything is stopped."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.ejection import main

pytestmark = pytest.mark.integration


def _children() -> list[int]:
    pid = os.getpid()
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_a_stalled_worker_times_out_fewer_requests_with_each_protection(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = set(_children())
    assert main(["--fault", "stall", "--requests", "60", "--rate", "30",
                 "--upstream-timeout", "3", "--stall-after", "0.3", "--eject-after", "2",
                 "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "ejection.json").read_text())
    both, ejection_only, neither = report["settings"]
    assert [s["name"] for s in report["settings"]] == ["both", "ejection only", "neither"]
    for setting in (both, ejection_only, neither):
        assert sum(setting["statuses"].values()) == 60
        assert set(setting["statuses"]) <= {"200", "504"}
        assert setting["p50_ms"] <= setting["p99_ms"] <= setting["max_ms"]
    assert both["stalls"] >= 1 and ejection_only["stalls"] == neither["stalls"] == 0
    assert neither["ejections"] == 0
    timeouts = [s["statuses"].get("504", 0) for s in (both, ejection_only, neither)]
    assert timeouts[0] < timeouts[1] <= timeouts[2], timeouts
    assert "| both | 2 | 0.3 | " in capsys.readouterr().out
    assert set(_children()) <= before     # each kvroute up and its workers were stopped


def test_bad_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--workers", "1", "--out", str(tmp_path / "out")]) == 2
    assert "--workers: must be >= 2, got 1" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
