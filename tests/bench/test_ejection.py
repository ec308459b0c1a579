"""``bench.ejection``: through a real ``kvroute up`` per setting, a stalled worker costs fewer
timeouts with ejection than without, the counts add up, and everything is stopped."""

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


def test_a_stalled_worker_times_out_fewer_requests_with_ejection(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = set(_children())
    assert main(["--fault", "stall", "--requests", "16", "--concurrency", "2",
                 "--upstream-timeout", "0.5", "--eject-after", "2",
                 "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "ejection.json").read_text())
    on, off = report["settings"]
    assert (on["eject_after"], off["eject_after"]) == (2, 0)
    assert (on["stall_after_s"], off["stall_after_s"]) == (1.0, 0.0) and off["stalls"] == 0
    for setting in (on, off):
        assert sum(setting["statuses"].values()) == 16
        assert set(setting["statuses"]) <= {"200", "504"}
        assert setting["p50_ms"] <= setting["p99_ms"] <= setting["max_ms"]
    assert on["ejections"] >= 1 and off["ejections"] == 0
    assert on["statuses"].get("504", 0) < off["statuses"].get("504", 0)
    assert "| 2 | 1 | 200: " in capsys.readouterr().out
    assert set(_children()) <= before     # each kvroute up and its workers were stopped


def test_bad_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--workers", "1", "--out", str(tmp_path / "out")]) == 2
    assert "--workers must be at least 2" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
