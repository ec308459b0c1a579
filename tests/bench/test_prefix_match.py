"""The prefix-match benchmark fills an approximate index and times matches against it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.prefix_match import main


def test_reports_match_time_and_bytes_per_held_block(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["--workers", "3,40", "--requests", "60", "--queries", "20", "--repeat", "2",
                 "--prefixes", "4", "--prefix-blocks", "8", "--tail-blocks", "4",
                 "--out", str(out)]) == 0
    report = json.loads((out / "prefix_match.json").read_text())
    assert [size["workers"] for size in report["sizes"]] == [3, 40]
    for size in report["sizes"]:
        assert size["match_us"] == min(size["match_us_passes"]) > 0
        assert len(size["match_us_passes"]) == 2
        # every tail block is held once; trunks by one worker or more
        assert 60 * 4 < size["distinct_blocks"] <= 60 * 4 + 4 * 8
        assert size["blocks_held"] >= size["distinct_blocks"]
        assert size["bytes_per_block"] > 0 and size["insert_us"] > 0
    # three workers share the four trunks more than forty do
    three, forty = report["sizes"]
    assert three["blocks_held"] - three["distinct_blocks"] <= (
        forty["blocks_held"] - forty["distinct_blocks"])


@pytest.mark.parametrize("workers", ["", "0", "a,b"])
def test_rejects_a_bad_fleet_size_list(tmp_path: Path, workers: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--workers", workers, "--out", str(tmp_path)]) == 2
    assert "--workers" in capsys.readouterr().err
