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
    assert capsys.readouterr().err == ("kvroute launch-vllm: --worker: no launchable worker "
                                       "other (a real worker needs a launch: block)\n")


def test_unreadable_fleet_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch-vllm", "--fleet", str(tmp_path / "nope.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvroute launch-vllm: {tmp_path / 'nope.yaml'}: cannot read fleet "
                          "file") and err.count("\n") == 1


@pytest.mark.parametrize(("edit", "message"), [
    (("launch: {model: /m, python: /py}",
      "launch: {model: /m, python: /py, devices: [0]}, tensor_parallel: 2"),
     "workers[0].launch.devices: [0] is 1 GPU, but worker 'real-0' has tensor_parallel: 2, "
     "which needs 2 (one per rank)"),
    (("python: /py}", "python: /py, max_model_len: -5}"),
     "workers[0].launch.max_model_len: must be a positive integer"),
    (("python: /py}", "python: /py, enable_prefix_caching: false}, "
                      "kv_events: 'tcp://127.0.0.1:5557'"),
     "workers[real-0].kv_events: needs prefix caching"),     # found when building the command
    (("emulate: {port: 9103}", "emulate: {port: 99999}"),
     "workers[2].emulate.port: must be an integer within [1, 65535], got 99999"),
])
def test_bad_fleet_exits_2_with_one_line_naming_the_file(
        edit: tuple[str, str], message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET.replace(*edit))
    assert main(["launch-vllm", "--fleet", str(fleet), "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"kvroute launch-vllm: {fleet}: {message}\n"
    assert captured.out == ""
