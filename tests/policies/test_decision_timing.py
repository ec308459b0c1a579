"""policies/timing.py: the synthetic fleet and the measurement loop (not its speed)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from policies.engine import PolicyEngine
from policies.loader import load_routing
from policies.timing import synthetic_views, time_decisions
from router.cli import main
from workers.fleet import load_fleet

ROOT = Path(__file__).resolve().parents[2]


def test_synthetic_views_repeat_the_fleet_with_unique_ids() -> None:
    fleet = load_fleet(ROOT / "config" / "fleet.yaml")
    assert [v.id for v in synthetic_views(fleet, 3, random.Random(0))] == [
        "h100-0", "a100-0", "l40s-0"]
    many = synthetic_views(fleet, 7, random.Random(0))
    assert [v.id for v in many] == ["h100-0-0", "a100-0-1", "l40s-0-2", "h100-0-3",
                                    "a100-0-4", "l40s-0-5", "h100-0-6"]
    assert [v.gpu.name for v in many[:3]] == [s.info.gpu.name for s in fleet.workers]
    assert all(v.healthy for v in many)


def test_time_decisions_runs_every_request_through_producers_and_decide() -> None:
    fleet = load_fleet(ROOT / "config" / "fleet.yaml")
    engine = PolicyEngine.build(load_routing(ROOT / "config" / "routing.yaml"), fleet, seed=0)
    timing = time_decisions(engine, fleet, requests=20, workers=5)
    assert (timing.requests, timing.workers) == (20, 5)
    assert timing.prompt_tokens_mean > 20            # the rendered template alone is longer
    assert 0 < timing.decide_p50_us <= timing.decide_p99_us
    assert 0 < timing.decide_cpu_p50_us <= timing.decide_cpu_p99_us
    assert timing.line().startswith("20 requests x 5 workers (mean prompt ")


def test_time_decisions_needs_a_fleet(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(ROOT / "config" / "routing.yaml"),
                 "--time-decisions", "5"]) == 2
    assert capsys.readouterr().err == "--time-decisions needs --fleet\n"
