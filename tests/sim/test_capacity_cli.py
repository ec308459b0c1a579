"""``kvroute sim`` for capacity planning, end to end on small traces: a configurable SLO,
offered and goodput rates in absolute terms, why a goodput is 0.0, the fleet cost at the
goodput rate, and the engines' own ``max_model_len`` in the summary."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from router.cli import main

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "config" / "fleets" / "bench-mixed.yaml"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _fleet(tmp_path: Path, gpu: str, emulate: str = "") -> Path:
    path = tmp_path / f"{gpu}.yaml"
    path.write_text(f"gpu_classes:\n  {gpu}: {{price_per_hour: 1.00}}\n"
                    f"models:\n  {MODEL}:\n    arch: llama-3.1-8b\n"
                    f"workers:\n  - id: {gpu}-0\n    gpu: {gpu}\n    models: [{MODEL}]\n"
                    f"    emulate: {{port: 19150{emulate}}}\n")
    return path


def _long_and_short(tmp_path: Path) -> Path:
    """Ten requests 5 s apart, every other one a 20,000-token prompt: an idle L40S serves
    each in about 2 s, past their relative TTFT target (3 x an idle H100's prefill, ~1.8 s),
    and the short ones well within theirs."""
    path = tmp_path / "long-short.jsonl"
    rows = [{"arrival_s": 5.0 * i, "prompt_tokens": 20000 if i % 2 else 500,
             "output_tokens": 8} for i in range(10)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(tmp_path: Path, name: str, *args: str) -> dict[str, Any]:
    out = tmp_path / name
    assert main(["sim", "--policies", "round-robin", "--out", str(out), *args]) == 0
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def _met(tmp_path: Path, name: str) -> list[int]:
    with (tmp_path / name / "requests" / "round-robin.csv").open() as fh:
        return [int(row["meets_slo"]) for row in csv.DictReader(fh)]


def test_an_absolute_ttft_target_changes_which_requests_meet_the_slo(tmp_path: Path) -> None:
    trace, fleet = str(_long_and_short(tmp_path)), str(_fleet(tmp_path, "l40s"))
    relative = _run(tmp_path, "rel", "--trace", trace, "--fleet", fleet)
    assert _met(tmp_path, "rel") == [1, 0] * 5            # the long prompts miss
    assert relative["policies"]["round-robin"]["slo_attainment"] == 0.5
    assert relative["slo"]["ttft"] == "relative"
    absolute = _run(tmp_path, "abs", "--trace", trace, "--fleet", fleet, "--slo-ttft-s", "10")
    assert _met(tmp_path, "abs") == [1] * 10
    assert absolute["policies"]["round-robin"]["slo_attainment"] == 1.0
    assert absolute["slo"] == {"ttft": "absolute", "ttft_s": 10.0, "ttft_floor_s": None,
                               "ttft_prefill_factor": None, "tpot_s": 0.05,
                               "attainment": 0.9}
    with (tmp_path / "abs" / "requests" / "round-robin.csv").open() as fh:
        assert {row["slo_ttft_s"] for row in csv.DictReader(fh)} == {"10.0000"}
    header = (tmp_path / "abs" / "summary.md").read_text().splitlines()[0]
    assert "SLO: TTFT ≤ 10 s and TPOT ≤ 50 ms." in header
    # a TPOT target between the short answers' (~23 ms) and the long ones' (~27 ms)
    _run(tmp_path, "tpot", "--trace", trace, "--fleet", fleet, "--slo-ttft-s", "10",
         "--slo-tpot-ms", "25")
    assert _met(tmp_path, "tpot") == [1, 0] * 5


def test_a_plateau_fleet_reports_plateau_with_its_idle_attainment(tmp_path: Path) -> None:
    """Half the requests miss even on an idle L40S: goodput 0.0, and why."""
    trace, fleet = str(_long_and_short(tmp_path)), str(_fleet(tmp_path, "l40s"))
    summary = _run(tmp_path, "plateau", "--trace", trace, "--fleet", fleet, "--goodput")
    entry = summary["policies"]["round-robin"]
    assert entry["goodput_rate_scale"] == 0.0
    assert entry["goodput_floor"] == "plateau"
    assert entry["idle_attainment"] == 0.5
    assert entry["idle_attainment"] == min(entry["goodput_probes"])[1]
    assert entry["goodput_rps"] == 0.0 and entry["goodput_cost_per_mtok_fleet"] is None
    md = (tmp_path / "plateau" / "summary.md").read_text()
    assert "* round-robin: the SLO is not met at 1/2 of the rate either (attainment 50 %" in md
    # the same fleet under a lower attainment target, or an absolute TTFT target, has a rate
    lower = _run(tmp_path, "half", "--trace", trace, "--fleet", fleet, "--goodput",
                 "--slo-attainment", "0.5")["policies"]["round-robin"]
    assert lower["goodput_rate_scale"] > 0 and lower["goodput_floor"] is None
    assert lower["idle_attainment"] is None
    assert "goodput at ≥ 50 % of requests" in (tmp_path / "half" / "summary.md").read_text()


def test_offered_and_goodput_rates_are_requests_over_the_span_times_the_scale(
        tmp_path: Path) -> None:
    rows = [json.loads(line) for line in _long_and_short(tmp_path).read_text().splitlines()]
    span = rows[-1]["arrival_s"] - rows[0]["arrival_s"]                   # 45 s, unscaled
    base_rps = len(rows) / span
    base_tok_s = sum(r["prompt_tokens"] for r in rows) / span
    fleet = str(_fleet(tmp_path, "h100"))
    summary = _run(tmp_path, "x2", "--trace", str(tmp_path / "long-short.jsonl"),
                   "--fleet", fleet, "--rate-scale", "2", "--goodput",
                   "--slo-ttft-s", "10")
    trace = summary["trace"]
    assert trace["span_s"] == span                  # the trace's own clock, not the scaled one
    assert trace["offered_rps"] == pytest.approx(base_rps * 2)
    assert trace["offered_prompt_tok_s"] == pytest.approx(base_tok_s * 2)
    entry = summary["policies"]["round-robin"]
    assert entry["goodput_rate_scale"] > 2
    assert entry["goodput_rps"] == pytest.approx(base_rps * entry["goodput_rate_scale"])
    assert entry["goodput_prompt_tok_s"] == pytest.approx(
        base_tok_s * entry["goodput_rate_scale"])
    md = (tmp_path / "x2" / "summary.md").read_text()
    assert f"Offered load: {base_rps * 2:.3g} req/s and {base_tok_s * 2:,.0f} prompt tok/s" in md
    assert f"= {entry['goodput_rps']:.3g} req/s" in md


def test_the_fleet_cost_at_goodput_is_the_fleets_cost_at_that_scale(tmp_path: Path) -> None:
    """goodput_cost_per_mtok_fleet: fleet $/h over the tokens per hour served at the goodput
    scale, the same as a run at that scale reports as its own $/Mtok fleet."""
    trace, fleet = str(_long_and_short(tmp_path)), str(_fleet(tmp_path, "h100"))
    searched = _run(tmp_path, "g", "--trace", trace, "--fleet", fleet, "--goodput",
                    "--slo-ttft-s", "10")["policies"]["round-robin"]
    scale = searched["goodput_rate_scale"]
    at_scale = _run(tmp_path, "at", "--trace", trace, "--fleet", fleet,
                    "--rate-scale", repr(scale))["policies"]["round-robin"]
    assert searched["goodput_cost_per_mtok_fleet"] == pytest.approx(
        at_scale["cost_per_mtok_fleet"])
    assert searched["goodput_cost_per_mtok_busy"] == pytest.approx(
        at_scale["cost_per_mtok_busy"])
    per_hour = 1.00                                   # one worker at $1/h
    tokens_per_hour = at_scale["throughput_tok_s"] * 3600
    assert searched["goodput_cost_per_mtok_fleet"] == pytest.approx(
        per_hour / tokens_per_hour * 1e6)
    header = (tmp_path / "g" / "summary.md").read_text().splitlines()[2]
    assert header.endswith("| $/Mtok busy at goodput | $/Mtok fleet at goodput |")


def test_the_summary_reports_the_max_model_len_the_engine_enforces(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": i, "prompt_tokens": n,
                                         "output_tokens": 4}) + "\n"
                             for i, n in enumerate((1000, 3000))))
    fleet = str(_fleet(tmp_path, "h100", ", max_model_len: 2048"))
    summary = _run(tmp_path, "mml", "--trace", str(trace), "--fleet", fleet)
    assert summary["fleet"]["workers"][0]["max_model_len"] == 2048
    assert summary["policies"]["round-robin"]["rejected"] == 1     # what it enforced
    plain = _run(tmp_path, "plain", "--trace", str(trace), "--fleet", str(FLEET))
    assert {w["max_model_len"] for w in plain["fleet"]["workers"]} == {131072}


@pytest.mark.parametrize(("args", "message"), [
    (["--slo-ttft-s", "0"], "kvroute sim: --slo-ttft-s: must be a finite number > 0, got 0"),
    (["--slo-ttft-s", "nan"], "--slo-ttft-s: must be a finite number > 0, got nan"),
    (["--slo-tpot-ms", "-5"], "kvroute sim: --slo-tpot-ms: must be a finite number > 0, got -5"),
    (["--slo-tpot-ms", "inf"], "--slo-tpot-ms: must be a finite number > 0, got inf"),
    (["--slo-attainment", "0"], "kvroute sim: --slo-attainment: must be a number in (0, 1], "
                                "got 0"),
    (["--slo-attainment", "1.5"], "--slo-attainment: must be a number in (0, 1], got 1.5"),
])
def test_bad_slo_values_exit_2_with_a_one_line_message(
        tmp_path: Path, args: list[str], message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "--trace", str(_long_and_short(tmp_path)), "--fleet", str(FLEET),
                 "--policies", "round-robin", "--out", str(tmp_path / "o"), *args])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()              # refused before anything ran


def test_slo_attainment_one_is_accepted(tmp_path: Path) -> None:
    summary = _run(tmp_path, "one", "--trace", str(_long_and_short(tmp_path)),
                   "--fleet", str(_fleet(tmp_path, "h100")), "--slo-attainment", "1")
    assert summary["slo"]["attainment"] == 1.0


def test_scorecard_help_states_the_jobs_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["scorecard", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--jobs JOBS policies simulated in parallel (default: 2)" in help_text
