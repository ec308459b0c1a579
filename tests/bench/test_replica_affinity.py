"""``bench.replica_affinity``: conversations over two replicas, live (Redis, emulators, routers)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.replica_affinity import main, moves

pytestmark = pytest.mark.integration


def test_moves_count_the_turns_that_changed_worker() -> None:
    assert moves([["a", "a", "b", "b", "a"], ["c"], []]) == 2


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")
def test_replicas_sharing_redis_keep_each_conversation_on_its_worker(tmp_path: Path) -> None:
    """Turns alternating between two replicas of one Redis stay where one replica keeps them
    (the prompts each routes are learnt by the other)."""
    assert main(["--conversations", "3", "--turns", "3", "--runs", "1",
                 "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "replica_affinity.json").read_text())
    by_name = {row["configuration"]: row for row in report["rows"]}
    assert list(by_name) == ["one", "shared", "apart"]
    assert by_name["one"]["moves"] == by_name["shared"]["moves"] == 0
    assert all(row["possible"] == 6 and len(row["workers"]) == 3 for row in report["rows"])
    assert by_name["shared"]["worker_hit_rate"] > 0.5


def test_bad_options_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--turns", "1", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "kvroute bench replica-affinity: --turns: must be >= 2, got 1\n")


def test_a_fleet_of_real_workers_is_refused(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "real.yaml"
    fleet.write_text("models:\n  m: {arch: llama-3-8b}\nworkers:\n"
                     "  - {id: w, gpu: h100, models: [m], url: 'http://127.0.0.1:1'}\n")
    assert main(["--fleet", str(fleet), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == (
        f"kvroute bench replica-affinity: {fleet}: every worker needs an emulate: block\n")
