"""``kvroute scorecard`` end to end on small traces in the shared traces' formats."""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from router.cli import main
from sim.scorecard import AZURE_CODE, MOONCAKE, SERVEGEN_R1

ROOT = Path(__file__).resolve().parents[2]


def _traces(tmp_path: Path) -> Path:
    """A Mooncake file whose conversations share prefixes and an Azure code CSV, 24 rows each."""
    traces = tmp_path / "traces"
    traces.mkdir()
    with gzip.open(traces / MOONCAKE, "wt") as fh:
        for i in range(24):
            conversation = i % 4
            blocks = [1000 * conversation + b for b in range(2 + i // 4)]
            fh.write(json.dumps({"timestamp": 250 * i, "input_length": 512 * len(blocks),
                                 "output_length": 16, "hash_ids": blocks}) + "\n")
    start = datetime(2023, 11, 16, 18, 0, 0)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(24):
        at = start + timedelta(seconds=0.3 * i)
        rows.append(f"{at:%Y-%m-%d %H:%M:%S}.{at.microsecond:06d}0,{300 + 97 * i},{8 + i}")
    with gzip.open(traces / AZURE_CODE, "wt") as fh:
        fh.write("\n".join(rows) + "\n")
    return traces


def test_scorecard_simulates_each_case_and_judges_it(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    args = ["scorecard", "--out", str(out), "--traces", str(_traces(tmp_path)),
            "--cases", "mooncake-1-1000,azure-1-1500", "--peers", "round-robin,llm-d-default",
            "--jobs", "1"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "case 1 of 2: mooncake-1-1000" in captured.err
    for case in ("mooncake-1-1000", "azure-1-1500"):
        summary = json.loads((out / case / "summary.json").read_text())
        assert list(summary["policies"]) == ["kvroute", "round-robin", "llm-d-default"]
        assert summary["trace"]["requests"] == 24
    mooncake = json.loads((out / "mooncake-1-1000" / "summary.json").read_text())
    assert mooncake["trace"]["jitter_s"] == 3.0
    card = json.loads((out / "scorecard.json").read_text())
    goals = [(v["case"], v["goal"]) for v in card["verdicts"]]
    assert goals == [
        ("mooncake-1-1000", "goodput against the best peer"),
        ("mooncake-1-1000", "goodput against round-robin"),
        ("mooncake-1-1000", "prefix hit rate against the infinite-cache ceiling"),
        ("mooncake-1-1000", "busy cost per Mtok at goodput against the cheapest peer's"),
        ("azure-1-1500", "goodput against the best peer"),
        ("azure-1-1500", "busy cost per Mtok at goodput against the cheapest peer's")]
    # each verdict carries the numbers of the summary it was read from
    prefix = card["verdicts"][2]
    assert prefix["value"] == mooncake["policies"]["kvroute"]["prefix_hit_rate"]
    assert prefix["reference"] == mooncake["policies"]["kvroute"]["prefix_hit_ceiling"] > 0
    table = (out / "scorecard.md").read_text()
    assert table in captured.out and "| goal | met | missed | not readable |" in table
    # judged again from the files alone, the same verdicts
    (out / "scorecard.json").unlink()
    assert main([*args, "--judge-only"]) == 0
    assert json.loads((out / "scorecard.json").read_text()) == card


def test_clients_without_max_tokens_are_simulated_and_said(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["scorecard", "--out", str(out), "--traces", str(_traces(tmp_path)),
                 "--cases", "azure-1-1500", "--peers", "round-robin", "--jobs", "1",
                 "--client-max-tokens", "none"]) == 0
    summary = json.loads((out / "azure-1-1500" / "summary.json").read_text())
    assert summary["settings"]["client_max_tokens"] == "none"
    assert json.loads((out / "scorecard.json").read_text())["client_max_tokens"] == {
        "azure-1-1500": "none"}
    assert (out / "scorecard.md").read_text().startswith(
        "`--client-max-tokens`: none in 1 of 1 cases (otherwise each answer's recorded length).")


def test_a_routing_file_is_judged_under_its_name(tmp_path: Path) -> None:
    routing = tmp_path / "edited.yaml"
    routing.write_text((ROOT / "config" / "routing.yaml").read_text().replace(
        "cost_tolerance: 0.05", "cost_tolerance: 0.2"))
    out = tmp_path / "out"
    args = ["scorecard", "--out", str(out), "--traces", str(_traces(tmp_path)),
            "--cases", "azure-1-1500", "--peers", "round-robin,kvroute", "--jobs", "1",
            "--routing", str(routing)]
    assert main(args) == 0
    summary = json.loads((out / "azure-1-1500" / "summary.json").read_text())
    # the edited file first, the repository's default beside the peers
    assert list(summary["policies"]) == ["edited", "round-robin", "kvroute"]
    card = json.loads((out / "scorecard.json").read_text())
    assert card["policy"] == "edited"
    goodput = card["verdicts"][0]
    assert goodput["value"] == summary["policies"]["edited"]["goodput_rate_scale"]
    peers = {name: entry["goodput_rate_scale"] for name, entry in summary["policies"].items()
             if name != "edited"}
    best = max(peers, key=lambda name: peers[name])
    assert (goodput["reference_name"], goodput["reference"]) == (best, peers[best])
    table = (out / "scorecard.md").read_text()
    assert table.startswith("| case | goal | edited | reference | ratio | target | met |")
    # judged again from the files alone, under the same name
    (out / "scorecard.json").unlink()
    assert main([*args, "--judge-only"]) == 0
    assert json.loads((out / "scorecard.json").read_text()) == card


def test_an_unreadable_servegen_archive_is_named(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    archive = tmp_path / "traces" / SERVEGEN_R1
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"not a tar archive")
    assert main(["scorecard", "--out", str(tmp_path / "o"), "--traces", str(tmp_path / "traces"),
                 "--cases", "servegen-r1-43200-300", "--peers", "round-robin"]) == 2
    err = capsys.readouterr().err
    assert "kvroute scorecard: " in err and str(archive) in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("extra", "message"), [
    (["--cases", "no-such-case"], "unknown case(s) no-such-case; choose from mooncake-1-1000"),
    (["--cases", "azure-1-1500", "--traces", "/nonexistent"],
     "no such trace: /nonexistent/azure_llm_2023_code.csv.gz"),
    (["--cases", "azure-1-1500", "--judge-only"], "summary.json: missing"),
    (["--jobs", "0"], "--jobs: must be >= 1"),
    (["--client-max-tokens", "lots"],
     "--client-max-tokens: 'lots': give exact, none or a number of tokens"),
    (["--routing", "/nonexistent/mine.yaml"], "--routing: /nonexistent/mine.yaml: no such file"),
    (["--routing", str(ROOT / "config" / "fleet.yaml")], "fleet.yaml: "),
    (["--routing", "README.md"], "--routing: README.md: give a .yaml or .yml file"),
    (["--routing", str(ROOT / "config" / "examples" / "token-aware.yaml"),
      "--peers", "token-aware"],
     "would be named 'token-aware', as a peer in --peers is; rename the file"),
])
def test_bad_input_exits_2_with_a_clear_message(tmp_path: Path, extra: list[str], message: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scorecard", "--out", str(tmp_path / "o"), *extra]) == 2
    assert message in capsys.readouterr().err


def test_an_out_folder_that_cannot_be_made_is_refused_before_any_case(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = main(["scorecard", "--out", str(blocker / "o"), "--cases", "azure-1-1500",
                 "--traces", str(_traces(tmp_path))])
    assert code == 2
    captured = capsys.readouterr()
    assert captured.err == (f"kvroute scorecard: --out: cannot write {blocker / 'o'}: "
                            "Not a directory\n")
    assert captured.out == ""


def test_an_unknown_peer_is_refused_before_any_case(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A misspelt ``--peers`` started the first case, its output folder made, and failed
    there as a failed simulation; ``--cases`` and ``--routing`` were checked up front."""
    out = tmp_path / "out"
    code = main(["scorecard", "--out", str(out), "--cases", "azure-1-1500",
                 "--traces", str(_traces(tmp_path)), "--peers", "round-robin,nope"])
    assert code == 2
    captured = capsys.readouterr()
    assert captured.err == (
        "kvroute scorecard: --peers: unknown peer policy 'nope' (known: round-robin, "
        "least-requests, sglang-cache-aware, llm-d-default, dynamo-kv, "
        "production-stack-prefix); or use 'kvroute' or a routing YAML path\n")
    assert captured.out == ""
    assert not out.exists()
    missing = tmp_path / "mine.yaml"          # a routing file as a peer: it must exist
    assert main(["scorecard", "--out", str(out), "--peers", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"kvroute scorecard: --peers: policy {str(missing)!r}: no such routing file\n")
    assert not out.exists()


def test_an_empty_peer_list_is_refused_before_any_case(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--peers ,,`` simulated every case, kvroute alone, for goals with no peer to be
    judged against; ``kvroute sim --policies ,,`` is refused."""
    out = tmp_path / "out"
    code = main(["scorecard", "--out", str(out), "--cases", "azure-1-1500",
                 "--traces", str(_traces(tmp_path)), "--peers", " , ,"])
    assert code == 2
    assert capsys.readouterr() == (
        "", "kvroute scorecard: --peers: give at least one peer policy\n")
    assert not out.exists()


def test_a_run_stopped_midway_leaves_no_verdicts_of_an_earlier_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A complete run, then one stopped in its second case: the first run's scorecard.md and
    .json stood beside the new run's first case, looking complete (and --judge-only judged
    the mix)."""
    out = tmp_path / "out"
    traces = _traces(tmp_path)
    args = ["scorecard", "--out", str(out), "--traces", str(traces),
            "--cases", "mooncake-1-1000,azure-1-1500", "--peers", "round-robin", "--jobs", "1"]
    assert main(args) == 0
    assert (out / "scorecard.md").exists() and (out / "scorecard.json").exists()
    (traces / AZURE_CODE).write_bytes(b"not a gzip file")    # the second case cannot run
    assert main(args) != 0
    assert "case 2 of 2: azure-1-1500" in capsys.readouterr().err
    assert not (out / "scorecard.md").exists() and not (out / "scorecard.json").exists()
