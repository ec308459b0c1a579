"""``bench.loop_stall``: through a real ``kvroute up`` on free ports, each case's request is
answered as the router answers it, the stalls are measured, and everything is stopped."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest
import yaml

from bench.launch import REPO_ROOT
from bench.loop_stall import CASES, _fleet_on_free_ports, run

pytestmark = pytest.mark.integration


def _children() -> list[int]:
    pid = os.getpid()
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _args(tmp_path: Path, cases: str, repeat: int = 2) -> argparse.Namespace:
    return argparse.Namespace(fleet=REPO_ROOT / "config" / "fleet.yaml",
                              routing=REPO_ROOT / "config" / "routing.yaml", cases=cases,
                              repeat=repeat, out=tmp_path / "out")


def test_each_case_is_answered_and_its_stall_measured(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    before = set(_children())
    assert run(_args(tmp_path, "chat,token-ids,surrogate,empty-objects")) == 0
    report = json.loads((tmp_path / "out" / "loop_stall.json").read_text())
    by_key = {case["key"]: case for case in report["cases"]}
    assert list(by_key) == ["chat", "token-ids", "surrogate", "empty-objects"]
    assert by_key["chat"]["statuses"] == [200, 200]
    # a million tokens fit no worker's 8,192-token window: the router answers 400 itself
    assert by_key["token-ids"]["statuses"] == [400, 400]
    assert by_key["token-ids"]["body_bytes"] > 2_000_000
    # the router routes it; the emulated worker's parser refuses the surrogate
    assert by_key["surrogate"]["statuses"] == [400, 400]
    # 11 million values: refused before they are parsed
    assert by_key["empty-objects"]["statuses"] == [413, 413]
    for case in by_key.values():
        assert len(case["stall_ms"]) == len(case["request_s"]) == 2
        assert len(case["rss_growth_mb"]) == 2 and min(case["rss_growth_mb"]) >= 0
        assert all(stall >= 0 for stall in case["stall_ms"])   # 0: no probe had to wait
    # reading and refusing a 2.9 MB body takes the loop longer than the 10 ms between probes
    assert all(stall > 0 for stall in by_key["token-ids"]["stall_ms"])
    table = capsys.readouterr().out
    assert "| 1,000,000 token ids | 2.9 MB |" in table and "| 400 |" in table
    assert by_key["chat"]["answer_bytes"] > 100
    assert set(_children()) <= before     # kvroute up and its emulated workers were stopped


def test_the_fleet_copy_listens_on_free_ports(tmp_path: Path) -> None:
    path, model = _fleet_on_free_ports(REPO_ROOT / "config" / "fleet.yaml", tmp_path)
    workers = yaml.safe_load(path.read_text())["workers"]
    ports = [w["emulate"]["port"] for w in workers]
    assert model == "meta-llama/Llama-3.1-8B-Instruct"
    assert len(set(ports)) == len(workers) and not {8101, 8102, 8103} & set(ports)
    assert [w["id"] for w in workers] == ["h100-0", "a100-0", "l40s-0"]


@pytest.mark.parametrize(("cases", "repeat", "message"), [
    ("chat,nope", 1, "unknown case(s) nope"),
    ("chat", 0, "--repeat: must be >= 1, got 0"),
])
def test_bad_options_exit_2_before_starting_anything(tmp_path: Path, cases: str, repeat: int,
                                                     message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert run(_args(tmp_path, cases, repeat)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_every_case_has_a_distinct_key() -> None:
    assert len({case.key for case in CASES}) == len(CASES)
