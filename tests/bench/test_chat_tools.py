"""The chat-tools benchmark times the tokens producer on agents' chats offering tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.chat_tools import ROWS, main


def test_every_row_is_timed_and_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    out = tmp_path / "out"
    assert main(["--tools", "3", "--requests", "5", "--out", str(out)]) == 0
    report = json.loads((out / "chat_tools.json").read_text())
    assert (report["tools"], report["requests"]) == (3, 5)
    assert list(report["rows"]) == list(ROWS)
    assert all(0 < row["p50_us"] <= row["p99_us"] for row in report["rows"].values())
    table = capsys.readouterr().out
    assert "| tools, written once |" in table and "| no tools |" in table


@pytest.mark.parametrize(("argv", "error"), [
    (["--tools", "0"], "--tools"), (["--requests", "0"], "--requests")])
def test_bad_options_are_refused(tmp_path: Path, argv: list[str], error: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert error in capsys.readouterr().err
