"""The decode-guard benchmark fills a worker with incumbents and times admissions and
completions at that count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.decode_guard import main
from policies.latency import incumbents as layouts
from router.cli import build_parser


def test_reports_admission_and_completion_cpu_per_count(tmp_path: Path) -> None:
    out = tmp_path / "out"
    counts = [0, 3, layouts.ARRAYS_FROM + 10]     # none, listed, in arrays
    assert main(["--incumbents", ",".join(map(str, counts)), "--requests", "50",
                 "--out", str(out)]) == 0
    report = json.loads((out / "decode_guard.json").read_text())
    assert report["requests"] == 50
    assert [c["incumbents"] for c in report["counts"]] == counts
    for count in report["counts"]:
        # every request admitted was completed: the worker holds what it was filled with
        assert count["incumbents_after"] == count["incumbents"]
        assert 0 < count["admit_p50_us"] <= count["admit_p99_us"]
        assert 0 < count["complete_p50_us"] <= count["complete_p99_us"]


def test_runs_as_a_kvroute_bench_command(tmp_path: Path) -> None:
    args = build_parser().parse_args(["bench", "decode-guard", "--incumbents", "2",
                                      "--requests", "5", "--out", str(tmp_path)])
    assert args.func(args) == 0
    assert (tmp_path / "decode_guard.json").exists()


@pytest.mark.parametrize("counts", ["", "-1", "a,b"])
def test_rejects_a_bad_count_list(tmp_path: Path, counts: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--incumbents", counts, "--out", str(tmp_path)]) == 2
    assert "--incumbents" in capsys.readouterr().err
