"""``kvroute trace cache-curve`` end to end on a small Mooncake trace and bench-mixed's KV."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from router.cli import main
from sim.cache_curve import prefix_ceiling
from sim.simulator import fleet_kv_tokens
from sim.traces import load_trace
from workers.fleet import load_fleet

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "config" / "fleets" / "bench-mixed.yaml"


def _conversations(tmp_path: Path) -> Path:
    """Six conversations of five turns, interleaved: each turn holds the previous turns'
    blocks and adds one, behind a system prompt of two blocks that every request shares."""
    path = tmp_path / "conversations.jsonl.gz"
    rows: list[dict[str, object]] = []
    for turn in range(5):
        for conversation in range(6):
            blocks = [1, 2, *(100 * (conversation + 1) + b for b in range(turn + 1))]
            rows.append({"timestamp": 1000 * len(rows), "input_length": 512 * len(blocks),
                         "output_length": 8, "hash_ids": blocks})
    with gzip.open(path, "wt") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_curve_and_the_cache_needed_match_the_pooled_lru(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace_path, out = _conversations(tmp_path), tmp_path / "out"
    multiples = (0.0002, 0.0005, 0.001, 1.0)
    assert main(["trace", "cache-curve", "--trace", str(trace_path), "--fleet", str(FLEET),
                 "--multiples", ",".join(map(str, multiples)), "--shares", "0.5,0.9",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "cache_curve.json").read_text())
    assert (out / "cache_curve.md").read_text() == printed
    assert (out / "cache_curve.png").stat().st_size > 10_000

    trace, kv = load_trace(trace_path), fleet_kv_tokens(load_fleet(FLEET))
    ceiling = prefix_ceiling(trace)
    assert report["fleet"]["kv_tokens"] == kv
    assert report["ceiling"] == pytest.approx(ceiling) and ceiling > 0.5
    assert report["trace"]["distinct_blocks"] == 2 + 6 * 5
    assert f"infinite-cache prefix ceiling {ceiling:.1%}" in printed
    lru = [p["lru_rate"] for p in report["points"]]
    assert lru == pytest.approx([
        prefix_ceiling(trace, capacity_tokens=int(kv * m) // 512 * 512) for m in multiples])
    assert lru[0] < lru[-1] == pytest.approx(ceiling)    # 2 blocks of room against 32
    for point in report["points"]:
        assert point["lru_rate"] <= point["optimal_rate"] + 1e-12
        assert f"| {point['multiple']:g} | {point['capacity_tokens']:,} | " in printed

    for needed in report["needed"]:
        blocks = needed["lru_tokens"] // 512
        assert needed["lru_multiple"] == pytest.approx(needed["lru_tokens"] / kv)
        wanted = needed["share"] * ceiling
        assert prefix_ceiling(trace, capacity_tokens=512 * blocks) >= wanted - 1e-12
        assert prefix_ceiling(trace, capacity_tokens=512 * (blocks - 1)) < wanted
        assert needed["optimal_multiple"] <= needed["lru_multiple"]
        assert (f"| {needed['share']:.0%} | {needed['lru_multiple']:.3g} × "
                f"({needed['lru_tokens']:,} tokens) |") in printed


def test_a_trace_that_shares_no_prefix_has_nothing_to_cache(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "unique.jsonl"
    path.write_text("".join(json.dumps({"arrival_s": t, "prompt_tokens": 900,
                                        "output_tokens": 4}) + "\n" for t in range(5)))
    assert main(["trace", "cache-curve", "--trace", str(path), "--fleet", str(FLEET)]) == 0
    printed = capsys.readouterr().out
    assert "infinite-cache prefix ceiling 0.0%" in printed
    assert "a cache of any size hits nothing" in printed
    # no token or hash ids: no blocks, not "0 distinct 512-token blocks"
    assert "no prefix blocks (its requests carry neither token ids nor hash ids)" in printed
    assert "distinct" not in printed


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--multiples", "1,two", "--multiples: comma-separated numbers, got '1,two'"),
    ("--multiples", "0.5,-1", "--multiples: each must be > 0, got -1"),
    ("--shares", "0.9,1.2", "--shares: each must be in (0, 1], got 1.2"),
    ("--limit", "0", "--limit: must be at least 1"),
    ("--fleet", "no/such/fleet.yaml", "cannot read fleet file"),
    ("--trace", "no/such/trace.jsonl", "no/such/trace.jsonl"),
    ("--out", "/dev/null/out", "--out: cannot write /dev/null/out: Not a directory"),
])
def test_bad_input_is_refused_with_its_reason(tmp_path: Path, option: str, value: str,
                                              message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    args = {"--trace": str(_conversations(tmp_path)), "--fleet": str(FLEET)}
    args[option] = value
    assert main(["trace", "cache-curve", *(x for kv in args.items() for x in kv)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("kvroute trace cache-curve: ")
    assert message in captured.err


def test_a_kv_size_given_in_tokens_stands_for_the_fleet_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(_conversations(tmp_path))
    kv = fleet_kv_tokens(load_fleet(FLEET))
    multiples = "0.0002,0.0005,0.001,1"
    assert main(["trace", "cache-curve", "--trace", trace, "--fleet", str(FLEET),
                 "--multiples", multiples, "--out", str(tmp_path / "fleet")]) == 0
    assert main(["trace", "cache-curve", "--trace", trace, "--kv-tokens", str(kv),
                 "--multiples", multiples, "--out", str(tmp_path / "given")]) == 0
    printed = capsys.readouterr().out
    assert f"The fleet's KV: {kv:,} tokens (as given)." in printed
    by_fleet = json.loads((tmp_path / "fleet" / "cache_curve.json").read_text())
    given = json.loads((tmp_path / "given" / "cache_curve.json").read_text())
    assert given["fleet"] == {"name": None, "kv_tokens": kv}
    assert {k: v for k, v in given.items() if k != "fleet"} == {
        k: v for k, v in by_fleet.items() if k != "fleet"}

    assert main(["trace", "cache-curve", "--trace", trace, "--kv-tokens", "0"]) == 2
    assert "--kv-tokens: must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:      # one unit or the other, not both
        main(["trace", "cache-curve", "--trace", trace, "--kv-tokens", "5",
              "--fleet", str(FLEET)])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
