"""The block-hash benchmark replays a trace's prompts through the blocks producer."""

from __future__ import annotations

import json
from pathlib import Path

from bench.block_hashes import main, markdown


def test_prompts_extending_earlier_ones_are_counted_remembered(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]},
            {"timestamp": 10, "input_length": 1536, "output_length": 8, "hash_ids": [1, 2, 3]},
            {"timestamp": 20, "input_length": 512, "output_length": 8, "hash_ids": [4]}]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "out"
    assert main(["--trace", str(trace), "--again", "--out", str(out)]) == 0
    report = json.loads((out / "block_hashes.json").read_text())
    assert report["requests"] == 3 and report["prompt_tokens"] == 3072
    # 192 blocks of 16 tokens; the second prompt's first 64 were the first prompt's
    assert report["blocks_remembered"] == 64 / 192
    assert 0 < report["p50_us"] <= report["p99_us"]
    assert report["again"]["p50_us"] > 0
    assert report["memo_bytes_per_block"] > 0
    table = markdown(report).splitlines()
    assert table[2].startswith("| first | 3 | 3,072 |") and table[2].endswith("| 33.3% |")
    assert table[3].startswith("| again | 3 |")
