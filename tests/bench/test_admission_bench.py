"""``bench.admission``: the routing files it compares are valid and say what each setting
means, and a short run against a real ``kvroute up`` answers every request and writes its
report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench.admission import SETTINGS, fleet_file, main, routing_file, run
from policies.loader import load_routing
from workers.fleet import load_fleet


def test_each_setting_is_a_valid_routing_file(tmp_path: Path) -> None:
    sections = {s: load_routing(routing_file(tmp_path, s, 16)).section("admission")
                for s in SETTINGS}
    assert sections["none"] is None
    fifo, priority = sections["limit-fifo"], sections["limit-priority"]
    assert fifo.max_in_flight == priority.max_in_flight == 16
    assert {t: b.priority for t, b in fifo.tenants.items()} == {"chat": 0, "batch": 0}
    assert {t: b.priority for t, b in priority.tenants.items()} == {"chat": 1, "batch": -1}
    fleet = load_fleet(fleet_file(tmp_path, 3, 4))
    assert [w.info.id for w in fleet.workers] == ["h100-0", "h100-1", "h100-2"]


@pytest.mark.integration
def test_a_short_run_answers_every_request(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(workers=1, max_num_seqs=2, flood=4, flood_tokens=16,
                              probe_interval=0.4, probe_tokens=4, seconds=2.0, warmup=0.5,
                              settings="limit-priority", seed=0, cost_requests=200,
                              out=tmp_path / "out")
    assert run(args) == 0
    report = json.loads((tmp_path / "out" / "admission.json").read_text())
    (result,) = report["results"]
    assert result["setting"] == "limit-priority"
    assert result["chat_sent"] >= 4
    assert len(result["chat_ttft_s"]) == result["chat_sent"]
    assert set(result["statuses"]) == {"200"} and result["batch_tokens"] > 0
    assert (tmp_path / "out" / "admission.png").stat().st_size > 0
    cost = report["cost_per_request"]
    assert cost["no_section_us"] > 0 and cost["budgets_and_limit_us"] > 0
    assert "| limit-priority |" in capsys.readouterr().out


def test_an_unknown_setting_is_refused(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--settings", "none,lifo", "--cost-requests", "0", "--out", str(tmp_path)]) == 2
    assert "unknown setting(s) lifo" in capsys.readouterr().err
