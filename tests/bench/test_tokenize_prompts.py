"""The tokenize benchmark replays a trace's prompts, as text, through the tokens producer."""

from __future__ import annotations

import json
from pathlib import Path

from bench.tokenize_prompts import main, markdown


def test_a_prompt_extending_an_earlier_one_finds_its_chunks_cached(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]},
            {"timestamp": 10, "input_length": 1536, "output_length": 8, "hash_ids": [1, 2, 3]},
            {"timestamp": 20, "input_length": 512, "output_length": 8, "hash_ids": [4]}]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "out"
    assert main(["--trace", str(trace), "--chunk-chars", "0,256", "--out", str(out)]) == 0
    report = json.loads((out / "tokenize.json").read_text())
    whole, chunked = report["rows"]
    assert report["requests"] == 3
    assert whole["prompt_tokens"] == chunked["prompt_tokens"] > 0    # the same tokens
    assert whole["cached_char_share"] == 0.0
    # the second prompt's text starts with the first one's: all of it but its last chunk
    # (at most 256 characters and the line they end) is found again
    first_share = 1024 / 3072
    assert first_share - 0.1 < chunked["cached_char_share"] < first_share
    assert chunked["cache_entries"] > whole["cache_entries"] == 3
    table = markdown(report).splitlines()
    assert table[2].startswith("| 0 (whole texts) | 3 |") and table[2].endswith("| 0.0 % |")
    assert table[3].startswith("| 256 | 3 |")


def test_negative_chunk_chars_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 16, "output_length": 1,
                                 "hash_ids": [1]}) + "\n")
    assert main(["--trace", str(trace), "--chunk-chars", "-1", "--out",
                 str(tmp_path / "out")]) == 2
