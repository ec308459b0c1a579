"""bench.emulator end to end on one worker for a short window: JSON and plot written."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench.emulator import add_arguments, run

pytestmark = pytest.mark.integration


def test_one_worker_window_writes_json_and_png(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--workers", "1", "--duration", "0.5", "--concurrency", "2",
                              "--prompt-tokens", "32", "--output-tokens", "8",
                              "--out", str(tmp_path)])
    assert run(args) == 0
    summary = json.loads((tmp_path / "emulator.json").read_text())
    (result,) = summary["results"]
    assert result["workers"] == 1 and result["steps"] > 0 and result["streamed_tokens"] > 0
    assert result["sustained"] == (result["lag_p99_ms"] <= 10.0)
    assert summary["max_sustained_workers"] in (0, 1)
    assert (tmp_path / "emulator.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
