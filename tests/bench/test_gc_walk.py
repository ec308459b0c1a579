"""The full-collection benchmark of the router's long-lived prefix structures."""

from __future__ import annotations

import json
from pathlib import Path

from bench.gc_walk import main


def test_each_structure_is_built_and_timed(tmp_path: Path) -> None:
    code = main(["--workers", "2", "--blocks", "300", "--ceiling-blocks", "500",
                 "--repeat", "2", "--out", str(tmp_path)])
    assert code == 0
    report = json.loads((tmp_path / "gc_walk.json").read_text())
    rows = {row["structure"]: row for row in report["structures"]}
    assert set(rows) == {"approximate", "exact", "ceiling"}
    assert rows["approximate"]["blocks"] == rows["exact"]["blocks"] == 600
    assert rows["ceiling"]["blocks"] == 500
    assert all(row["with_ms"] > 0 and row["without_ms"] > 0 for row in rows.values())
    assert all(row["added_ms"] == row["with_ms"] - row["without_ms"] for row in rows.values())


def test_sizes_below_one_are_refused(tmp_path: Path) -> None:
    assert main(["--blocks", "0", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "gc_walk.json").exists()


def test_the_exact_index_holds_exactly_the_blocks_reported() -> None:
    """Chains are cut to the size asked for, so the reported blocks are the blocks held."""
    import random

    from bench.gc_walk import build_exact

    index = build_exact(2, 300, random.Random(0))
    assert index.blocks("w0") == index.blocks("w1") == 300
