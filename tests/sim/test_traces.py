"""Trace loaders: Mooncake, Azure and generic JSONL; slicing, rate scaling, prefix ceiling."""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from sim.cache_curve import prefix_ceiling
from sim.traces import TraceError, load_trace, rescale

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces"


def _write_jsonl(path: Path, rows: Sequence[Mapping[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_mooncake_rows_become_prompts_with_shared_prefixes(tmp_path: Path) -> None:
    rows = [{"timestamp": 1000, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
            {"timestamp": 3000, "input_length": 700, "output_length": 0, "hash_ids": [0, 1]},
            {"timestamp": 2000, "input_length": 512, "output_length": 9, "hash_ids": [0]}]
    path = tmp_path / "t.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    trace = load_trace(path)
    assert [r.arrival_s for r in trace.requests] == [0.0, 1.0, 2.0]
    assert [r.num_prompt_tokens for r in trace.requests] == [1100, 512, 700]
    assert [r.output_tokens for r in trace.requests] == [5, 9, 1]   # 0 outputs become 1
    first, second, third = (trace.prompt_token_ids(r) for r in trace.requests)
    assert first[:512] == second and third[:700] == first[:700]
    # ceiling: request 2 hits block 0 (512); request 3 hits block 0 and the eleven whole
    # 16-token blocks of its partial block 1 (188 tokens) that request 1 held
    assert prefix_ceiling(trace) == pytest.approx((512 + 512 + 176) / (1100 + 512 + 700))


def test_slicing_happens_before_rate_scaling(tmp_path: Path) -> None:
    rows = [{"arrival_s": t, "prompt_tokens": 10, "output_tokens": 2} for t in range(10)]
    path = _write_jsonl(tmp_path / "g.jsonl", rows)
    trace = load_trace(path, duration_s=4.0, rate_scale=2.0)
    assert [r.arrival_s for r in trace.requests] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert len(load_trace(path, limit=3).requests) == 3
    assert [r.arrival_s for r in rescale(load_trace(path, limit=3), 4.0).requests] == [
        0.0, 0.25, 0.5]


def test_skip_leaves_out_the_first_requests_and_restarts_the_clock(tmp_path: Path) -> None:
    rows = [{"arrival_s": 2.0 * t, "prompt_tokens": 10 + t, "output_tokens": 2}
            for t in range(10)]
    path = _write_jsonl(tmp_path / "g.jsonl", rows)
    trace = load_trace(path, skip=4, limit=3)
    # rows 5-7 of the file, on a clock that starts at the first of them, indexed from 0
    assert [r.num_prompt_tokens for r in trace.requests] == [14, 15, 16]
    assert [r.arrival_s for r in trace.requests] == [0.0, 2.0, 4.0]
    assert [r.index for r in trace.requests] == [0, 1, 2]
    assert [r.num_prompt_tokens for r in load_trace(path, skip=4, duration_s=5.0).requests] == [
        14, 15, 16]
    with pytest.raises(TraceError, match="skip must be >= 0"):
        load_trace(path, skip=-1)
    with pytest.raises(TraceError, match="skip 10 leaves none of its 10 requests"):
        load_trace(path, skip=10)


def test_skip_counts_requests_in_arrival_order_after_the_jitter(tmp_path: Path) -> None:
    rows = [{"arrival_s": 10.0 * (i // 5), "prompt_tokens": 10 + i, "output_tokens": 1}
            for i in range(20)]
    path = _write_jsonl(tmp_path / "g.jsonl", rows)
    whole = load_trace(path, jitter_s=3.0, seed=7)
    tail = load_trace(path, jitter_s=3.0, seed=7, skip=7)
    assert [r.num_prompt_tokens for r in tail.requests] == [
        r.num_prompt_tokens for r in whole.requests[7:]]
    origin = whole.requests[7].arrival_s
    assert [r.arrival_s for r in tail.requests] == pytest.approx(
        [r.arrival_s - origin for r in whole.requests[7:]])


def test_generic_jsonl_accepts_lengths_text_and_token_ids(tmp_path: Path) -> None:
    rows = [{"arrival_s": 5.0, "prompt_tokens": 30, "output_tokens": 4, "tenant": "a"},
            {"arrival_s": 5.5, "prompt": "hello world", "output_tokens": 2, "session": "s"},
            {"arrival_s": 6.0, "prompt_token_ids": [1, 2, 3], "output_tokens": 1}]
    trace = load_trace(_write_jsonl(tmp_path / "g.jsonl", rows))
    a, b, c = trace.requests
    assert a.tenant == "a" and len(trace.prompt_token_ids(a)) == 30
    assert trace.prompt_token_ids(b) == [15339, 1917]        # cl100k "hello", " world"
    assert b.session == "s" and b.arrival_s == 0.5
    assert trace.prompt_token_ids(c) == [1, 2, 3]


@pytest.mark.parametrize(("row", "message"), [
    ({"arrival_s": 0, "output_tokens": 1}, "exactly one of prompt_tokens"),
    ({"arrival_s": "x", "prompt_tokens": 1, "output_tokens": 1}, "arrival_s"),
    ({"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 0}, "output_tokens"),
])
def test_generic_jsonl_errors_name_line_and_field(tmp_path: Path, row: dict[str, object],
                                                  message: str) -> None:
    path = _write_jsonl(tmp_path / "bad.jsonl",
                        [{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}, row])
    with pytest.raises(TraceError, match=rf"bad.jsonl:2: .*{message}"):
        load_trace(path)


@pytest.mark.parametrize(("key", "value", "message"), [
    # Python's json reads NaN, Infinity and an overflowing literal as non-finite floats
    ("arrival_s", "NaN", "arrival_s: must be a finite number of seconds, got NaN"),
    ("arrival_s", "Infinity", "arrival_s: must be a finite number of seconds, got Infinity"),
    ("arrival_s", "-Infinity", "arrival_s: must be a finite number of seconds, got -Infinity"),
    ("arrival_s", "1e999", "arrival_s: must be a finite number of seconds, got Infinity"),
    ("arrival_s", "true", "arrival_s: must be a finite number of seconds, got true"),
    ("prompt_tokens", "NaN", "prompt_tokens: must be an integer in 1..10000000"),
    ("prompt_tokens", "Infinity", "prompt_tokens: must be an integer in 1..10000000"),
    ("prompt_tokens", "-3", "prompt_tokens: must be an integer in 1..10000000"),
    ("output_tokens", "NaN", "output_tokens: must be an integer >= 1"),
    ("output_tokens", "-Infinity", "output_tokens: must be an integer >= 1"),
    ("output_tokens", "-1", "output_tokens: must be an integer >= 1"),
])
def test_generic_jsonl_refuses_non_finite_and_negative_numbers(
        tmp_path: Path, key: str, value: str, message: str) -> None:
    row = {"arrival_s": "0", "prompt_tokens": "5", "output_tokens": "1", key: value}
    path = tmp_path / "bad.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1}\n'
                    + "{" + ", ".join(f'"{k}": {v}' for k, v in row.items()) + "}\n")
    with pytest.raises(TraceError) as error:
        load_trace(path)
    assert str(error.value) == f"{path}:2: {message}"


def test_a_missing_arrival_is_named(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "bad.jsonl", [{"prompt_tokens": 5, "output_tokens": 1}])
    with pytest.raises(TraceError) as error:
        load_trace(path)
    assert str(error.value) == f"{path}:1: arrival_s: required, a finite number of seconds"


@pytest.mark.parametrize("value", ["NaN", "Infinity", "1e999"])
def test_mooncake_refuses_a_non_finite_timestamp(tmp_path: Path, value: str) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n'
                    f'{{"timestamp": {value}, "input_length": 5, "output_length": 1, '
                    '"hash_ids": [1]}\n')
    with pytest.raises(TraceError, match=r"m.jsonl:2: timestamp: must be a finite number of "
                                         r"milliseconds, got (NaN|Infinity)$"):
        load_trace(path, fmt="mooncake")


@pytest.mark.parametrize(("options", "message"), [
    ({"rate_scale": float("nan")}, "rate scale must be a finite number > 0, got nan"),
    ({"rate_scale": float("inf")}, "rate scale must be a finite number > 0, got inf"),
    ({"jitter_s": float("nan")}, "jitter must be a finite number >= 0 seconds, got nan"),
    ({"jitter_s": float("inf")}, "jitter must be a finite number >= 0 seconds, got inf"),
    ({"duration_s": float("nan")}, "duration must be a finite number > 0 seconds, got nan"),
    ({"duration_s": 0.0}, "duration must be a finite number > 0 seconds, got 0.0"),
])
def test_load_trace_refuses_non_finite_settings(tmp_path: Path, options: dict[str, float],
                                                 message: str) -> None:
    path = _write_jsonl(tmp_path / "g.jsonl",
                        [{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1}])
    with pytest.raises(TraceError) as error:
        load_trace(path, **options)  # type: ignore[arg-type]
    assert str(error.value) == message
    if "rate_scale" in options:
        with pytest.raises(TraceError) as error:
            rescale(load_trace(path), options["rate_scale"])
        assert str(error.value) == message


def test_mooncake_with_too_few_hash_ids_is_refused(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "m.jsonl", [
        {"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [0, 1]}])
    with pytest.raises(TraceError, match="3 blocks of 512 needed"):
        load_trace(path)


def test_azure_csv_timestamps_and_unique_prompts(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:17:03.9799600,40,10\n"
                    "2023-11-16 18:17:04.0319600,40,8\n")
    trace = load_trace(path)
    first, second = trace.requests
    assert second.arrival_s == pytest.approx(0.052)
    assert trace.prompt_token_ids(first) != trace.prompt_token_ids(second)
    assert prefix_ceiling(trace) == 0.0


@pytest.mark.parametrize(("text", "where"), [
    ('\n\n{"arrival_s": 0, "prompt_tokens": 3\n', "3: not JSON: Expecting ',' delimiter "
     "(column 36)"),
    ('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 1}\n{"arrival_s": 1, "pro\n',
     "2: not JSON: Unterminated string starting (column 18)"),
])
def test_a_line_that_is_not_json_is_named_by_its_number_and_column(
        tmp_path: Path, text: str, where: str) -> None:
    """The first line with text was always said to be line 1, blank lines before it or not,
    and no column said where a line was cut."""
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(TraceError) as error:
        load_trace(path)
    assert str(error.value) == f"{path}:{where}"


def test_a_misspelt_field_is_refused_and_other_fields_left_unread(tmp_path: Path) -> None:
    """A row's ``sesion`` was ignored: every request lost its session, with nothing said."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 1, "id": 7, '
                    '"model": "m"}\n'
                    '{"arrival_s": 1, "prompt_tokens": 3, "output_tokens": 1, "sesion": "s"}\n')
    with pytest.raises(TraceError) as error:
        load_trace(path)
    assert str(error.value) == (
        f"{path}:2: 'sesion' is not a field of a generic row: 'session'? (fields: arrival_s, "
        "output_tokens, prompt_tokens, prompt, prompt_token_ids, session, tenant)")
    path.write_text('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 1, "id": 7}\n')
    assert len(load_trace(path).requests) == 1        # an id of its own: left unread


def test_booleans_are_not_token_ids(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_token_ids": [true, 5], "output_tokens": 1}\n')
    with pytest.raises(TraceError, match="prompt_token_ids: must be a non-empty list of token "
                                         "ids"):
        load_trace(path)


def test_azure_times_are_read_as_utc_whatever_the_machines_time_zone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read in the local time zone, two requests either side of New York's spring change an
    hour apart were one second apart there."""
    import time

    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-03-12 01:59:59.0,40,10\n2023-03-12 03:00:00.0,40,8\n")
    for zone in ("UTC", "America/New_York"):
        monkeypatch.setenv("TZ", zone)
        time.tzset()
        assert [r.arrival_s for r in load_trace(path).requests] == [0.0, 3601.0]
    monkeypatch.undo()
    time.tzset()


def test_shared_traces_load_with_the_documented_shape() -> None:
    mooncake = load_trace(SHARED / "mooncake_conversation_trace.jsonl.gz")
    assert len(mooncake.requests) == 12031
    assert mooncake.span_s == pytest.approx(3536.999)
    assert prefix_ceiling(mooncake) == pytest.approx(0.3734, abs=5e-4)
    azure = load_trace(SHARED / "azure_llm_2023_code.csv.gz", limit=100)
    assert len(azure.requests) == 100 and azure.requests[0].num_prompt_tokens == 4808


def test_jitter_spreads_a_burst_within_its_interval_deterministically(tmp_path: Path) -> None:
    rows = [{"arrival_s": 10.0 * (i // 5), "prompt_tokens": 10, "output_tokens": 1}
            for i in range(20)]                      # four bursts of five at 0, 10, 20, 30
    path = _write_jsonl(tmp_path / "g.jsonl", rows)
    plain = load_trace(path)
    jittered = load_trace(path, jitter_s=3.0, seed=7)
    assert [r.arrival_s for r in plain.requests] == [10.0 * (i // 5) for i in range(20)]
    times = [r.arrival_s for r in jittered.requests]
    assert times == sorted(times) and len(set(times)) == 20
    # raw arrival = burst start + u, u in [0, 3); times are relative to the earliest (< 3 s)
    for burst in range(4):
        assert all(10 * burst - 3 <= t < 10 * burst + 3 for t in times[5 * burst:5 * burst + 5])
    assert [r.arrival_s for r in load_trace(path, jitter_s=3.0, seed=7).requests] == times
    assert [r.arrival_s for r in load_trace(path, jitter_s=3.0, seed=8).requests] != times
    with pytest.raises(TraceError, match="jitter must be a finite number >= 0 seconds"):
        load_trace(path, jitter_s=-1.0)


def _mooncake_rows(count: int) -> str:
    return "".join(json.dumps({"timestamp": 1000 * i, "input_length": 600, "output_length": 5,
                               "hash_ids": [i, i + 1]}) + "\n" for i in range(count))


@pytest.mark.parametrize("name", ["cut.jsonl.gz", "cut.csv.gz"])
def test_a_truncated_gzip_is_named_not_a_traceback(tmp_path: Path, name: str) -> None:
    """A download cut short ended in ``EOFError: Compressed file ended before the
    end-of-stream marker was reached`` and a traceback."""
    if name.endswith(".csv.gz"):
        text = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
            f"2023-11-16 18:17:{i % 60:02d}.0000000,{300 + i},{8 + i}\n" for i in range(3000))
    else:
        text = _mooncake_rows(3000)
    whole = gzip.compress(text.encode())
    path = tmp_path / name
    path.write_bytes(whole[:len(whole) // 2])
    with pytest.raises(TraceError, match=rf"^{path}: cannot read trace: truncated or corrupt "
                                         r"gzip after line \d+ \("):
        load_trace(path)


def test_bytes_that_are_not_utf8_are_named(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(_mooncake_rows(2).encode() + b'{"arrival_s": 0, "prompt": "caf\xe9"}\n')
    with pytest.raises(TraceError, match=rf"^{path}: not UTF-8 text \(invalid"):
        load_trace(path)


def test_a_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    """Spreadsheets save CSV with one; the header was then said to be wrong."""
    path = tmp_path / "excel.csv"
    path.write_text("\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:17:03.9799600,374,44\n", encoding="utf-8")
    assert [r.num_prompt_tokens for r in load_trace(path).requests] == [374]
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_text("\ufeff" + _mooncake_rows(2), encoding="utf-8")
    assert len(load_trace(jsonl).requests) == 2


@pytest.mark.parametrize(("row", "message"), [
    ("2023-11-16 18:17:04.0,-50,10", "ContextTokens must be 0..10000000 and GeneratedTokens "
                                     ">= 0, got -50 and 10"),
    ("2023-11-16 18:17:04.0,100,-1", "got 100 and -1"),
    ("2023-11-16 18:17:04.0,10000001,1", "got 10000001 and 1"),
])
def test_azure_rows_with_impossible_token_counts_are_refused(tmp_path: Path, row: str,
                                                             message: str) -> None:
    """They were made 1-token requests without a word (Mooncake and generic rows with the
    same values are refused)."""
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    f"2023-11-16 18:17:03.0,374,44\n{row}\n")
    with pytest.raises(TraceError, match=rf"^{path}:3: ") as info:
        load_trace(path)
    assert message in str(info.value)


def test_no_tokens_of_prompt_or_answer_are_replayed_as_one(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.0,374,0\n"
                    "2023-11-16 18:17:04.0,0,12\n")
    assert [(r.num_prompt_tokens, r.output_tokens) for r in load_trace(path).requests] == [
        (374, 1), (1, 12)]


def test_a_prompt_longer_than_any_window_is_refused_before_it_is_built(tmp_path: Path) -> None:
    """A generic row of 1e9 prompt tokens took 28 s and 5.7 GB before a MemoryError."""
    path = tmp_path / "huge.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_tokens": 1000000000, "output_tokens": 10}\n')
    with pytest.raises(TraceError, match=rf"^{path}:1: prompt_tokens: must be an integer in "
                                         r"1\.\.10000000$"):
        load_trace(path)


def test_an_upper_case_gz_is_decompressed(tmp_path: Path) -> None:
    path = tmp_path / "TRACE.CSV.GZ"
    path.write_bytes(gzip.compress(b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                   b"2023-11-16 18:17:03.0,374,44\n"))
    assert [r.num_prompt_tokens for r in load_trace(path).requests] == [374]


@pytest.mark.parametrize("name", ["upper.CSV", "azure.txt"])
def test_an_azure_csv_by_another_name_is_read_as_one(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.0,374,44\n")
    assert [r.num_prompt_tokens for r in load_trace(path).requests] == [374]


def test_a_mooncake_row_without_hash_ids_is_said_to_lack_them(tmp_path: Path) -> None:
    """It was read as the generic format and said to lack ``arrival_s``."""
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5}\n')
    with pytest.raises(TraceError, match=rf"^{path}:1: hash_ids: must be a list of integers$"):
        load_trace(path)
