"""policies/latency/evaluate.py: the samples come from the profile's learning estimator."""

from __future__ import annotations

import json
from pathlib import Path

from policies.latency.evaluate import collect

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_every_finished_request_of_a_small_slice_gives_one_sample(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 200 * i, "input_length": 600 + 16 * i, "output_length": 12,
             "hash_ids": [0, i + 1]} for i in range(24)]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    samples = collect(str(trace), str(REPO_ROOT / "config" / "fleets" / "reference-h100.yaml"),
                      str(REPO_ROOT / "config" / "routing.yaml"), None, 1.0, seed=0)
    assert len(samples) == len(rows)          # recorded once each, by the learning plugin
    assert [s.arrival_s for s in samples] == sorted(s.arrival_s for s in samples)
    assert all(s.observed_ttft_s and s.observed_ttft_s > 0 and s.raw_ttft_s > 0
               for s in samples)
    assert [s.prompt_tokens for s in samples] == [row["input_length"] for row in rows]
