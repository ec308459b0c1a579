"""ServeGen statistics -> requests: arrivals at the measured rate with the fitted law's
burstiness, lengths from the published distributions, deterministic by seed and span."""

from __future__ import annotations

import io
import itertools
import json
import statistics
import tarfile
from pathlib import Path

import pytest

from router.cli import main as kvroute
from sim.servegen import ServeGenError, read_archive, servegen_requests, write_jsonl
from sim.traces import load_trace
from tests.conftest import SHARED_DIR

R1_ARCHIVE = SHARED_DIR / "traces" / "servegen" / "servegen_reason_deepseek-r1.tar.gz"


def _rates(*rows: str) -> str:
    return "".join(row + "\n" for row in rows)


def _dataset(inputs: dict[int, float], outputs: dict[int, float],
             windows: tuple[int, ...] = (0,)) -> str:
    return json.dumps({str(w): {"input_tokens": repr(inputs), "output_tokens": repr(outputs),
                                "reason_ratio": "{0.5: 1.0}"} for w in windows})


def _archive(path: Path, members: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"data/reason/x/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def test_arrivals_keep_the_measured_rate_and_the_fitted_burstiness(tmp_path: Path) -> None:
    # client 1: Gamma of shape 0.25 (gap CV 2) whose fit's mean (shape x scale = 1 s) is
    # not the measured rate of 2 req/s; client 2: Weibull of shape 1 (exponential, CV 1)
    # at 0.5 req/s; both idle in their second window
    archive = _archive(tmp_path / "sg.tar.gz", {
        "chunk-1-trace.csv": _rates("0,2.0,2.0,Gamma,0.25,4.0", "600,0,0,,0,0"),
        "chunk-1-dataset.json": _dataset({100: 1.0}, {10: 1.0}),
        "chunk-2-trace.csv": _rates("0,0.5,1.0,Weibull,1.0,3.0", "600,0,0,,0,0"),
        "chunk-2-dataset.json": _dataset({200: 1.0}, {20: 1.0}),
    })
    requests = servegen_requests(read_archive(archive), 0, 1200, seed=3)
    by_client = {t: [r.arrival_s for r in requests if r.tenant == t]
                 for t in ("client-1", "client-2")}
    assert 0.85 * 1200 <= len(by_client["client-1"]) <= 1.15 * 1200
    assert 0.8 * 300 <= len(by_client["client-2"]) <= 1.2 * 300
    assert all(t < 600 for t in by_client["client-1"] + by_client["client-2"])
    gaps = _gaps(by_client["client-1"])
    assert 1.6 <= statistics.pstdev(gaps) / statistics.fmean(gaps) <= 2.4
    gaps = _gaps(by_client["client-2"])
    assert 0.8 <= statistics.pstdev(gaps) / statistics.fmean(gaps) <= 1.2
    assert [r.arrival_s for r in requests] == sorted(r.arrival_s for r in requests)


def test_lengths_follow_the_published_distributions(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "sg.tar.gz", {
        "chunk-7-trace.csv": _rates("0,5.0,1.0,Gamma,1.0,0.2"),
        "chunk-7-dataset.json": _dataset({50: 0.25, 400: 0.75, 900: 0.0}, {0: 0.5, 30: 0.5}),
    })
    requests = servegen_requests(read_archive(archive), 0, 600, seed=0)
    prompts = [r.prompt_tokens for r in requests]
    assert set(prompts) == {50, 400}        # never a value of probability 0
    assert 0.2 <= prompts.count(50) / len(prompts) <= 0.3
    assert {r.output_tokens for r in requests} == {1, 30}    # 0 tokens is sent as 1


def test_the_same_seed_and_window_give_the_same_requests_whatever_the_span(
        tmp_path: Path) -> None:
    archive = _archive(tmp_path / "sg.tar.gz", {
        "chunk-1-trace.csv": _rates("0,1.0,1.0,Gamma,1.0,1.0", "600,2.0,1.0,Gamma,1.0,0.5"),
        "chunk-1-dataset.json": _dataset({100: 0.5, 300: 0.5}, {10: 0.5, 90: 0.5}),
    })
    workload = read_archive(archive)
    whole = servegen_requests(workload, 0, 1200, seed=5)
    part = servegen_requests(workload, 500, 300, seed=5)
    shifted = [(r.arrival_s - 500, r.prompt_tokens, r.output_tokens) for r in whole
               if 500 <= r.arrival_s < 800]
    assert [(r.prompt_tokens, r.output_tokens) for r in part] == [s[1:] for s in shifted]
    assert [r.arrival_s for r in part] == pytest.approx([s[0] for s in shifted])
    assert len(part) > 100
    assert servegen_requests(workload, 0, 1200, seed=6) != whole


def test_a_client_without_lengths_is_skipped_and_counted(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "chunk-1-trace.csv").write_text(_rates("0,1.0,1.0,Gamma,1.0,1.0"))
    (folder / "chunk-1-dataset.json").write_text(_dataset({10: 1.0}, {10: 1.0}))
    (folder / "chunk-2-trace.csv").write_text(_rates("0,9.0,1.0,Gamma,1.0,1.0"))
    workload = read_archive(folder)
    assert [c.client_id for c in workload.clients] == ["1"]
    assert workload.without_lengths == ("2",)
    # a window whose 6 h length window is absent sends nothing
    (folder / "chunk-1-trace.csv").write_text(_rates("0,1.0,1.0,Gamma,1.0,1.0",
                                                     "21600,1.0,1.0,Gamma,1.0,1.0"))
    assert all(r.arrival_s < 600
               for r in servegen_requests(read_archive(folder), 0, 22200, seed=0))


@pytest.mark.parametrize(("members", "message"), [
    ({"chunk-1-trace.csv": "0,1.0,1.0,Gamma,1.0\n", "chunk-1-dataset.json": "{}"},
     r"chunk-1-trace.csv:1: expected 6 fields"),
    ({"chunk-1-trace.csv": "0,1.0,1.0,Pareto,1.0,1.0\n", "chunk-1-dataset.json": "{}"},
     r"chunk-1-trace.csv:1: unknown pattern 'Pareto'"),
    ({"chunk-1-trace.csv": "0,1.0,1.0,Gamma,1.0,1.0\n",
      "chunk-1-dataset.json": '{"0": {"input_tokens": "{10: oops}"}}'},
     r"chunk-1-dataset.json: window 0: input_tokens: not a \{value: probability\} literal"),
    ({"chunk-1-trace.csv": "0,1.0,1.0,Gamma,1.0,1.0\n"},
     r"no client has both a trace.csv and a dataset.json"),
    ({"notes.txt": "hello"}, r"no chunk-<client>-trace.csv files"),
    # an infinite rate would draw arrivals forever
    ({"chunk-1-trace.csv": "0,inf,1.0,Gamma,1.0,1.0\n", "chunk-1-dataset.json": "{}"},
     r"chunk-1-trace.csv:1: rate must be a finite number >= 0, got inf$"),
    ({"chunk-1-trace.csv": "0,nan,1.0,Gamma,1.0,1.0\n", "chunk-1-dataset.json": "{}"},
     r"chunk-1-trace.csv:1: rate must be a finite number >= 0, got nan$"),
    ({"chunk-1-trace.csv": "nan,1.0,1.0,Gamma,1.0,1.0\n", "chunk-1-dataset.json": "{}"},
     r"chunk-1-trace.csv:1: window start must be a finite number, got nan$"),
    ({"chunk-1-trace.csv": "0,1.0,1.0,Gamma,1.0,1.0\n",
      "chunk-1-dataset.json": '{"x": {"input_tokens": "{10: 1.0}"}}'},
     r"chunk-1-dataset.json: window 'x': not a start in seconds$"),
    ({"chunk-1-trace.csv": "0,1.0,1.0,Gamma,1.0,1.0\n",
      "chunk-1-dataset.json": '{"0": {"input_tokens": {"10": NaN}}}'},
     r"window 0: input_tokens: probability of '10' must be a finite number >= 0$"),
    ({"chunk-1-trace.csv": "0,1.0,1.0,Gamma,1.0,1.0\n",
      "chunk-1-dataset.json": '{"0": {"input_tokens": {"ten": 1.0}}}'},
     r"window 0: input_tokens: 'ten' is not a token count$"),
    ({"chunk-1-trace.csv": "0,1.0,1.0,Gamma,1.0,1.0\n",
      "chunk-1-dataset.json": '{"0": {"input_tokens": "{1e999: 1.0}"}}'},
     r"window 0: input_tokens: inf is not a token count$"),
    ({"chunk-1-trace.csv": "0,1.0,1.0,Gamma,1.0,1.0\n",
      "chunk-1-dataset.json": '{"0": {"input_tokens": "{10: 1e999}"}}'},
     r"window 0: input_tokens: probability of 10 must be a finite number >= 0$"),
])
def test_malformed_data_is_refused_naming_the_member(tmp_path: Path, members: dict[str, str],
                                                      message: str) -> None:
    with pytest.raises(ServeGenError, match=message):
        read_archive(_archive(tmp_path / "sg.tar.gz", members))


def test_the_command_writes_a_trace_the_simulator_reads(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    archive = _archive(tmp_path / "sg.tar.gz", {
        "chunk-4-trace.csv": _rates("0,2.0,1.0,Gamma,1.0,0.5"),
        "chunk-4-dataset.json": _dataset({120: 1.0}, {40: 1.0}),
    })
    out = tmp_path / "trace.jsonl.gz"
    assert kvroute(["trace", "servegen", "--archive", str(archive), "--start", "60",
                    "--duration", "120", "--out", str(out)]) == 0
    assert "requests from 1 clients over 120 s" in capsys.readouterr().out
    trace = load_trace(out)
    assert 150 <= len(trace.requests) <= 330
    assert {(r.num_prompt_tokens, r.output_tokens, r.tenant) for r in trace.requests} == {
        (120, 40, "client-4")}
    assert trace.span_s < 120
    # a span running past the data's end (600 s) has requests over its first part only: the
    # rate is of that part (it was of the whole span asked, 2.5 times too low here)
    assert kvroute(["trace", "servegen", "--archive", str(archive), "--start", "400",
                    "--duration", "500", "--out", str(tmp_path / "cut.jsonl")]) == 0
    said = capsys.readouterr().out
    count = len(load_trace(tmp_path / "cut.jsonl").requests)
    assert (f"{count} requests from 1 clients over 200 s ({count / 200:.2f} req/s, the data "
            "ending at 600 s: 500 s asked)") in said
    # a span with no request is an error, and writes nothing
    empty = tmp_path / "empty.jsonl"
    assert kvroute(["trace", "servegen", "--archive", str(archive), "--start", "900",
                    "--out", str(empty)]) == 2
    assert "no request in [900, 1500) s (the data spans 0 to 600 s)" in capsys.readouterr().err
    assert not empty.exists()
    assert kvroute(["trace", "servegen", "--archive", str(tmp_path / "missing.tar.gz"),
                    "--out", str(empty)]) == 2
    assert "cannot read ServeGen data" in capsys.readouterr().err


def test_length_tables_may_be_json_objects_with_string_keys(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "sg.tar.gz", {
        "chunk-1-trace.csv": _rates("0,1.0,1.0,Gamma,1.0,1.0"),
        "chunk-1-dataset.json": json.dumps({"0": {"input_tokens": {"7": 1.0},
                                                  "output_tokens": {"3": 1.0}}}),
    })
    requests = servegen_requests(read_archive(archive), 0, 600, seed=0)
    assert requests and {(r.prompt_tokens, r.output_tokens) for r in requests} == {(7, 3)}


def _good_archive(tmp_path: Path) -> Path:
    return _archive(tmp_path / "sg.tar.gz", {
        "chunk-4-trace.csv": _rates("0,2.0,1.0,Gamma,1.0,0.5"),
        "chunk-4-dataset.json": _dataset({120: 1.0}, {40: 1.0}),
    })


@pytest.mark.parametrize(("args", "message"), [
    (["--start", "nan"], "--start: must be a finite number >= 0, got nan"),
    (["--start", "inf"], "--start: must be a finite number >= 0, got inf"),
    (["--start", "-60"], "--start: must be a finite number >= 0, got -60"),
    (["--duration", "nan"], "--duration: must be a finite number > 0, got nan"),
    (["--duration", "inf"], "--duration: must be a finite number > 0, got inf"),
    (["--duration", "0"], "--duration: must be a finite number > 0, got 0"),
])
def test_the_command_refuses_bad_numbers_in_one_line(tmp_path: Path, args: list[str],
                                                     message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.jsonl"
    assert kvroute(["trace", "servegen", "--archive", str(_good_archive(tmp_path)),
                    "--out", str(out), *args]) == 2
    assert capsys.readouterr().err == f"kvroute trace servegen: {message}\n"
    assert not out.exists()


def test_the_command_refuses_a_file_that_is_not_an_archive_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_tar = tmp_path / "notes.txt"
    not_tar.write_text("hello\n")
    good = _good_archive(tmp_path).read_bytes()
    truncated = tmp_path / "cut.tar.gz"
    truncated.write_bytes(good[:len(good) // 2])
    out = tmp_path / "t.jsonl"
    assert kvroute(["trace", "servegen", "--archive", str(not_tar), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"kvroute trace servegen: {not_tar}: cannot read ServeGen data: not a readable tar "
        "archive (plain, .gz, .bz2 or .xz) nor a folder\n")
    assert kvroute(["trace", "servegen", "--archive", str(truncated), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"kvroute trace servegen: {truncated}: cannot read ServeGen data: truncated or corrupt "
        "archive (Compressed file ended before the end-of-stream marker was reached)\n")
    assert kvroute(["trace", "servegen", "--archive", str(tmp_path / "missing.tar.gz"),
                    "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"kvroute trace servegen: {tmp_path / 'missing.tar.gz'}: cannot read ServeGen data: "
        "No such file or directory\n")
    assert not out.exists()


def test_the_command_makes_missing_folders_of_out_and_names_an_unwritable_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = _good_archive(tmp_path)
    # like every other --out of kvroute sim, trace and bench: missing folders are made
    nested = tmp_path / "new" / "dir" / "t.jsonl"
    assert kvroute(["trace", "servegen", "--archive", str(archive), "--duration", "60",
                    "--out", str(nested)]) == 0
    assert nested.stat().st_size > 0
    capsys.readouterr()
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert kvroute(["trace", "servegen", "--archive", str(archive), "--duration", "60",
                    "--out", str(blocked / "t.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvroute trace servegen: --out: cannot write {blocked / 't.jsonl'}: ")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_write_jsonl_round_trips_through_the_generic_loader(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "sg.tar.gz", {
        "chunk-4-trace.csv": _rates("0,1.0,1.0,Gamma,1.0,1.0"),
        "chunk-4-dataset.json": _dataset({12: 0.5, 34: 0.5}, {5: 1.0}),
    })
    requests = servegen_requests(read_archive(archive), 0, 600, seed=1)
    write_jsonl(requests, tmp_path / "t.jsonl")
    trace = load_trace(tmp_path / "t.jsonl")
    origin = round(requests[0].arrival_s, 6)
    assert [r.num_prompt_tokens for r in trace.requests] == [r.prompt_tokens for r in requests]
    assert [r.arrival_s for r in trace.requests] == pytest.approx(
        [round(r.arrival_s, 6) - origin for r in requests])
    assert {r.tenant for r in trace.requests} == {"client-4"}


def test_an_interrupted_write_leaves_no_file_at_the_path(tmp_path: Path) -> None:
    """An interrupted draw left a valid gzip of 20-39 rows of 3,314, which kvroute scorecard
    then took for the drawn trace on every later run."""
    archive = _archive(tmp_path / "sg.tar.gz", {
        "chunk-4-trace.csv": _rates("0,1.0,1.0,Gamma,1.0,1.0"),
        "chunk-4-dataset.json": _dataset({12: 0.5, 34: 0.5}, {5: 1.0}),
    })
    requests = servegen_requests(read_archive(archive), 0, 600, seed=1)

    class Interrupted(list[object]):
        def __iter__(self):  # type: ignore[no-untyped-def]
            yield requests[0]
            raise KeyboardInterrupt

    target = tmp_path / "t.jsonl.gz"
    with pytest.raises(KeyboardInterrupt):
        write_jsonl(Interrupted(), target)  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sg.tar.gz"]
    write_jsonl(requests, target)
    assert len(load_trace(target).requests) == len(requests)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sg.tar.gz", "t.jsonl.gz"]


@pytest.mark.skipif(not R1_ARCHIVE.exists(), reason="shared ServeGen archive not present")
def test_the_deepseek_r1_day_matches_its_published_statistics() -> None:
    workload = read_archive(R1_ARCHIVE)
    assert len(workload.clients) == 73 and workload.without_lengths == ()
    day = servegen_requests(workload, 0, 86_400, seed=0)
    # traces/README.md: aggregate rate mean 16.0 req/s; rate-weighted mean input 1,268 and
    # output 1,527 tokens
    assert len(day) / 86_400 == pytest.approx(16.0, rel=0.02)
    assert statistics.fmean(r.prompt_tokens for r in day) == pytest.approx(1268, rel=0.03)
    assert statistics.fmean(r.output_tokens for r in day) == pytest.approx(1527, rel=0.03)
