"""``bench.redis_sync``: against a real ``redis-server`` (started and stopped by the
benchmark), a replica's sync is timed beside the former keyspace scan, with the counts of
every replica read back, and the report is written."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from bench.redis_sync import run

pytestmark = pytest.mark.integration


def test_a_small_run_times_both_and_writes_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (make test installs it)")
    args = argparse.Namespace(keys="0,3000", replicas=3, syncs=3, out=tmp_path)
    assert run(args) == 0
    report = json.loads((tmp_path / "redis_sync.json").read_text())
    assert [row["keys"] for row in report["rows"]] == [0, 3000]
    for row in report["rows"]:
        assert row["sync"]["p50_ms"] > 0 and row["former_scan"]["p50_ms"] > 0
    assert "| 3,000 |" in capsys.readouterr().out
