"""``bench.endpoints``: through a real ``kvroute up`` on free ports, every case is answered
through the router and by the worker it chose, both timed, and everything is stopped."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from bench.endpoints import CASES, DEFAULT_FLEET, run
from bench.launch import REPO_ROOT

pytestmark = pytest.mark.integration


def _children() -> list[int]:
    pid = os.getpid()
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _args(tmp_path: Path, cases: str, repeat: int = 3, fleet: Path = DEFAULT_FLEET
          ) -> argparse.Namespace:
    return argparse.Namespace(fleet=fleet, routing=REPO_ROOT / "config" / "routing.yaml",
                              cases=cases, repeat=repeat, warmup=1, out=tmp_path / "out")


def test_every_case_is_timed_through_the_router_and_straight_to_its_worker(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = set(_children())
    assert run(_args(tmp_path, ",".join(case.key for case in CASES))) == 0
    report = json.loads((tmp_path / "out" / "endpoints.json").read_text())
    by_key = {case["key"]: case for case in report["cases"]}
    assert list(by_key) == [case.key for case in CASES]
    assert by_key["embeddings"]["model"] == "Qwen/Qwen3-Embedding-0.6B"
    assert by_key["chat"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    for case in by_key.values():
        assert case["statuses"] == [200]
        assert len(case["direct_ms"]) == len(case["routed_ms"]) == 3
        assert all(ms > 0 for ms in case["direct_ms"] + case["routed_ms"])
    table = capsys.readouterr().out
    assert "| responses-follow-up | meta-llama/Llama-3.1-8B-Instruct |" in table
    assert set(_children()) <= before     # kvroute up and its emulated workers were stopped


@pytest.mark.parametrize(("cases", "repeat", "fleet", "message"), [
    ("chat,nope", 1, DEFAULT_FLEET, "unknown case(s) nope"),
    ("chat", 0, DEFAULT_FLEET, "--repeat: must be >= 1, got 0"),
    ("embeddings", 1, REPO_ROOT / "config" / "fleet.yaml", "no model declared with runner "
                                                           "pooling"),
])
def test_bad_options_exit_2_before_starting_anything(
        tmp_path: Path, cases: str, repeat: int, fleet: Path, message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run(_args(tmp_path, cases, repeat, fleet)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
