"""``--repeat``: every target once per round, each one's spread and the hit-rate ratios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.replay import ReplayConfig, ReplayResult, run_replay
from bench.replay_report import markdown_table, write_replay
from bench.replay_rounds import hit_ratios, markdown_rounds, spreads

REPO = Path(__file__).resolve().parents[2]


def _run(name: str, number: int, hits: float | None, slo: float = 0.9,
         skipped: str | None = None) -> ReplayResult:
    return ReplayResult(name, skipped=skipped, round=number, requests=10, completed=10,
                        slo_attainment=None if skipped else slo, prefix_hit_rate=hits)


def _two_rounds() -> list[ReplayResult]:
    return [_run("kvroute", 1, 0.10, slo=0.93), _run("kvroute-rr", 1, 0.05, slo=0.86),
            _run("kvroute", 2, 0.08, slo=0.91), _run("kvroute-rr", 2, 0.04, slo=0.88)]


def test_each_target_spreads_over_its_rounds() -> None:
    first, second = spreads(_two_rounds())
    assert (first.name, first.runs, second.name, second.runs) == (
        "kvroute", 2, "kvroute-rr", 2)
    assert first.hit_rate is not None and first.slo_attainment is not None
    assert (first.hit_rate.low, first.hit_rate.high) == (0.08, 0.10)
    assert first.hit_rate.mean == pytest.approx(0.09)
    assert first.slo_attainment.mean == pytest.approx(0.92)


def test_ratios_compare_the_first_target_with_each_other_within_a_round() -> None:
    [ratio] = hit_ratios(_two_rounds())
    assert (ratio.baseline, ratio.other) == ("kvroute", "kvroute-rr")
    assert ratio.per_round == pytest.approx((2.0, 2.0))
    results = _two_rounds()
    results[3] = _run("kvroute-rr", 2, 0.05)          # 0.08 / 0.05 in round 2
    [ratio] = hit_ratios(results)
    assert ratio.per_round == pytest.approx((2.0, 1.6))
    assert ratio.spread is not None
    assert (ratio.spread.low, ratio.spread.high) == pytest.approx((1.6, 2.0))
    assert ratio.spread.mean == pytest.approx(1.8)


def test_a_skipped_or_unmeasured_run_leaves_its_round_out() -> None:
    results = [_run("kvroute", 1, 0.10), _run("kvroute-rr", 1, None, skipped="failed: x"),
               _run("kvroute", 2, 0.08), _run("kvroute-rr", 2, 0.0)]
    [ratio] = hit_ratios(results)
    assert ratio.per_round == (None, None)       # skipped; a zero hit rate has no ratio
    assert ratio.spread is None
    kvroute, rr = spreads(results)
    assert (kvroute.runs, rr.runs) == (2, 1)
    assert "| kvroute / kvroute-rr | –, – | – |" in markdown_rounds(results)


def test_one_round_keeps_the_plain_table() -> None:
    results = _two_rounds()[:2]
    assert markdown_rounds(results) == ""
    table = markdown_table(results)
    assert table.startswith("| Router |") and "Over " not in table
    assert hit_ratios(results[:1]) == []


def test_files_of_a_repeated_replay(tmp_path: Path) -> None:
    config = ReplayConfig(trace=Path("t"), targets=("kvroute", "kvroute-rr"), fleet=Path("f"),
                          repeat=2)
    paths = write_replay(tmp_path, config, _two_rounds(), "kvroute bench replay --repeat 2")
    document = json.loads(paths[0].read_text())
    assert document["config"]["repeat"] == 2
    spread = document["rounds"]["spreads"][0]
    assert spread["name"] == "kvroute" and spread["runs"] == 2
    assert spread["hit_rate"]["low"] == 0.08 and spread["hit_rate"]["high"] == 0.1
    ratio = document["rounds"]["hit_ratios"][0]
    assert ratio["per_round"] == pytest.approx([2.0, 2.0])
    text = paths[1].read_text()
    assert "| Round | Router |" in text and "| 2 | kvroute-rr |" in text
    assert "Over 2 rounds" in text and "| kvroute / kvroute-rr | 2.00, 2.00 |" in text
    assert paths[2].stat().st_size > 0


def test_rounds_run_every_target_in_order(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 2,
                                 "hash_ids": [1, 2]}) + "\n")
    config = ReplayConfig(trace=trace, targets=("direct", "nginx"),
                          fleet=REPO / "config" / "fleet.yaml", limit=1, launch="up", repeat=2)
    messages: list[str] = []
    results = run_replay(config, messages.append)      # neither runs under --launch up
    assert [(r.round, r.name) for r in results] == [
        (1, "direct"), (1, "nginx"), (2, "direct"), (2, "nginx")]
    assert "round 1 of 2" in messages and "round 2 of 2" in messages
    assert messages.index("round 2 of 2") > messages.index("round 1 of 2")
