"""``bench.lora_affinity``: LoRA adapters' requests over workers running one adapter at a
time, live (emulated workers, a router per routing)."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest

from bench.lora_affinity import ROUTINGS, main, workload

pytestmark = pytest.mark.integration


def test_the_workload_is_seeded_and_spans_the_adapters() -> None:
    arrivals = workload(200, 5.0, 4, seed=3)
    assert arrivals == workload(200, 5.0, 4, seed=3)
    assert {adapter for _, adapter in arrivals} == {"lora-0", "lora-1", "lora-2", "lora-3"}
    assert all(a < b for (a, _), (b, _) in pairwise(arrivals))


def test_each_routing_serves_every_request_and_reports_it(tmp_path: Path) -> None:
    assert main(["--requests", "8", "--rate", "20", "--max-tokens", "4", "--runs", "1",
                 "--time-scale", "0.2", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "lora_affinity.json").read_text())
    assert [row["routing"] for row in report["rows"]] == list(ROUTINGS)
    for row in report["rows"]:
        assert sum(row["served"].values()) == 8
        assert 0 < row["latency_p50_s"] <= row["latency_p90_s"] <= row["latency_p99_s"]
        assert row["deferred_request_s"] >= 0


def test_bad_options_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rate", "0", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "kvroute bench lora-affinity: --rate: must be a finite number > 0, got 0\n")
