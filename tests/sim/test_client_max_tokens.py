"""What simulated clients send as ``max_tokens``: the answers stay the trace's, only what
the router is told changes, kvroute learns the output length from finished requests, and the
outputs say how far its predictions were."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from policies.engine import PolicyEngine
from policies.loader import load_routing
from policies.peers.presets import routing_for
from sim.client_max_tokens import ClientMaxTokens
from sim.metrics import summarize
from sim.report import write_requests_csv
from sim.simulator import DecisionPoint, Simulation, SimulationSettings
from sim.traces import Trace, load_trace
from workers.fleet import FleetConfig, load_fleet

ROOT = Path(__file__).resolve().parents[2]
OUTPUTS = [3, 40, 7, 120, 15, 2, 60, 9] * 5      # 40 requests, geometric mean about 14


@pytest.mark.parametrize(("text", "expected"), [
    ("exact", ClientMaxTokens("exact")), ("none", ClientMaxTokens("none")),
    (" 4096 ", ClientMaxTokens("cap", 4096)), ("NONE", ClientMaxTokens("none"))])
def test_parse(text: str, expected: ClientMaxTokens) -> None:
    assert ClientMaxTokens.parse(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "0", "-5", "1.5"])
def test_parse_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"give exact, none or a number|at least 1 token"):
        ClientMaxTokens.parse(text)


def test_what_each_mode_sends() -> None:
    assert ClientMaxTokens.parse("exact").for_output(300) == 300
    assert ClientMaxTokens.parse("none").for_output(300) is None
    assert ClientMaxTokens.parse("4096").for_output(300) == 4096
    assert ClientMaxTokens.parse("256").for_output(300) == 300     # a longer answer: its cap
    assert [ClientMaxTokens.parse(t).label() for t in ("exact", "none", "64")] == [
        "exact", "none", "64"]


def _trace(tmp_path: Path) -> Trace:
    path = tmp_path / "trace.jsonl"
    rows = [{"arrival_s": 0.25 * i, "prompt_tokens": 300 + 7 * i, "output_tokens": out}
            for i, out in enumerate(OUTPUTS)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_trace(path)


def _simulate(trace: Trace, fleet: FleetConfig, policy: PolicyEngine,
              mode: str) -> tuple[list[DecisionPoint], list[int]]:
    points: list[DecisionPoint] = []
    settings = SimulationSettings(client_max_tokens=ClientMaxTokens.parse(mode))
    records = Simulation(trace, fleet, policy, settings, on_decision=points.append).run().records
    return points, [r.output_tokens for r in records]


@pytest.mark.parametrize("mode", ["exact", "none", "4096"])
def test_the_answers_are_the_traces_whatever_the_clients_send(tmp_path: Path,
                                                              mode: str) -> None:
    fleet = load_fleet(ROOT / "config" / "fleets" / "bench-mixed.yaml")
    engine = PolicyEngine.build(routing_for("round-robin"), fleet, seed=0)
    points, outputs = _simulate(_trace(tmp_path), fleet, engine, mode)
    assert outputs == OUTPUTS
    sent = [p.request.max_tokens for p in points]
    expected = {"exact": OUTPUTS, "none": [None] * len(OUTPUTS),
                "4096": [4096] * len(OUTPUTS)}[mode]
    assert sent == expected
    assert all(p.request.predicted_output_tokens is None for p in points)   # no producer


def test_kvroute_learns_the_output_length_clients_do_not_send(tmp_path: Path) -> None:
    fleet = load_fleet(ROOT / "config" / "fleets" / "bench-mixed.yaml")
    engine = PolicyEngine.build(load_routing(ROOT / "config" / "routing.yaml"), fleet, seed=0)
    points, outputs = _simulate(_trace(tmp_path), fleet, engine, "4096")
    assert outputs == OUTPUTS
    predictions = [p.request.predicted_output_tokens for p in points]
    # nothing until 20 requests have finished, then the typical share of the 4096-token cap
    assert predictions[0] is None
    learnt = [p for p in predictions if p is not None]
    assert learnt, "no prediction after the first 20 finished"
    assert all(5 <= p <= 40 for p in learnt), learnt
    assert all(p.request.expected_output_tokens == (p.request.predicted_output_tokens or 4096)
               for p in points)


def test_the_summary_and_the_request_rows_say_how_far_predictions_were(tmp_path: Path) -> None:
    fleet = load_fleet(ROOT / "config" / "fleets" / "bench-mixed.yaml")
    engine = PolicyEngine.build(load_routing(ROOT / "config" / "routing.yaml"), fleet, seed=0)
    settings = SimulationSettings(client_max_tokens=ClientMaxTokens.parse("none"))
    points: list[DecisionPoint] = []
    result = Simulation(_trace(tmp_path), fleet, engine, settings,
                        on_decision=points.append).run()
    predicted = [p.request.predicted_output_tokens for p in points]
    assert [r.predicted_output_tokens for r in result.records] == predicted
    pairs = [(r.output_tokens, r.predicted_output_tokens) for r in result.records
             if r.predicted_output_tokens is not None]
    assert pairs
    summary = summarize("kvroute", result.records, result.usage, 0.0, 1.0)
    ratios = sorted(out / pred for out, pred in pairs)
    assert summary["output_prediction"]["predicted"] == len(pairs)
    assert summary["output_prediction"]["ratio_p50"] == pytest.approx(
        float(np.percentile(ratios, 50)))
    csv_path = tmp_path / "requests.csv"
    write_requests_csv(csv_path, result.records)
    with csv_path.open() as fh:
        column = [row["predicted_output_tokens"] for row in csv.DictReader(fh)]
    assert column == ["" if p is None else str(p) for p in predicted]


def test_clients_that_send_their_answers_length_change_nothing(tmp_path: Path) -> None:
    fleet = load_fleet(ROOT / "config" / "fleets" / "bench-mixed.yaml")
    engine = PolicyEngine.build(load_routing(ROOT / "config" / "routing.yaml"), fleet, seed=0)
    points, _ = _simulate(_trace(tmp_path), fleet, engine, "exact")
    assert all(p.request.expected_output_tokens == p.request.max_tokens for p in points)
    assert any(p.request.predicted_output_tokens is not None for p in points)
