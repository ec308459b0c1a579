"""bench.decision_tail: the slowest decisions of two identical runs compared, drift removed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.decision_tail import main, relative_to_neighbours, slowest, tail_overlap

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_slowest_takes_the_largest_share_and_at_least_one() -> None:
    timings = [5.0, 9.0, 1.0, 7.0, 3.0, 8.0, 2.0, 6.0, 4.0, 10.0]
    assert slowest(timings, 0.3) == {9, 1, 5}
    assert slowest(timings, 0.01) == {9}


def test_tail_overlap_is_one_for_the_same_slow_decisions_and_zero_for_others() -> None:
    first = [float(v) for v in range(100)]
    assert tail_overlap(first, first, 0.05) == 1.0
    assert tail_overlap(first, list(reversed(first)), 0.05) == 0.0
    swapped = [*first[:95], 0.0, 96.0, 97.0, 98.0, 99.0]       # one of the five now fast
    assert tail_overlap(first, swapped, 0.05) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="same, non-empty"):
        tail_overlap(first, first[:-1], 0.05)


def test_relative_times_remove_drift_and_keep_a_spike() -> None:
    drifting = [100.0] * 50 + [200.0] * 50          # the machine halves its speed midway
    drifting[75] = 600.0                            # one slow decision
    relative = relative_to_neighbours(drifting, 10)
    assert relative[75] == 3.0
    assert set(relative[:75] + relative[76:]) == {1.0}
    assert slowest(relative, 0.01) == {75}          # the drift itself is not "slow"


def test_the_benchmark_times_the_same_sequence_twice_and_writes_json(tmp_path: Path) -> None:
    routing = REPO_ROOT / "config" / "examples" / "token-aware.yaml"
    assert main(["--routing", str(routing), "--workers", "8", "--decisions", "40",
                 "--warmup", "5", "--prompt-tokens", "256", "--window", "5",
                 "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "decision_tail.json").read_text())
    assert len(report["runs"]) == 2
    assert all(0 < run["cpu_p50_us"] <= run["cpu_p99_us"] for run in report["runs"])
    assert all(len(run["quarter_medians_us"]) == 4 for run in report["runs"])
    assert 0.0 <= report["tail_overlap"] <= 1.0 and -1.0 <= report["correlation"] <= 1.0
    with pytest.raises(SystemExit):
        main(["--share", "1.5", "--out", str(tmp_path)])
