"""``kvroute launch-vllm``: dry run prints each worker's command; bad input exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.cli import main

FLEET = """
models: {tiny: {arch: llama-3-8b, max_model_len: 2048}}
workers:
  - {id: real-0, gpu: a100, models: [tiny], url: "http://127.0.0.1:9101",
     launch: {model: /m, python: /py}}
  - {id: other, gpu: h100, models: [tiny], url: "http://10.0.0.2:8000"}
  - {id: emu, gpu: l40s, models: [tiny], emulate: {port: 9103}}
"""


def test_dry_run_prints_launchable_workers(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    assert main(["launch-vllm", "--fleet", str(fleet), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "# real-0 -> http://127.0.0.1:9101"
    assert out[1].startswith("/py -m vllm.entrypoints.openai.api_server --model /m ")
    assert len(out) == 2


def test_worker_without_launch_block_exits_2(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    assert main(["launch-vllm", "--fleet", str(fleet), "--dry-run", "--worker", "other"]) == 2
    assert "--worker: no launchable worker other" in capsys.readouterr().err


def test_unreadable_fleet_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch-vllm", "--fleet", str(tmp_path / "nope.yaml"), "--dry-run"]) == 2
    assert "cannot read fleet file" in capsys.readouterr().err
