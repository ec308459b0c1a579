"""The table of docs/benchmarks.md, "A busy worker's incumbents as arrays", printed from the
``kvroute bench decode-guard`` outputs in this folder (``before-N.json``: the tree before
the array layout, ``after-N.json``: with it, runs alternating):

    python docs/benchmarks/token-aware/decode-guard-arrays/table.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIELDS = ("admit_p50_us", "admit_p99_us", "complete_p50_us", "complete_p99_us")


def runs(label: str) -> list[dict[int, dict[str, Any]]]:
    paths = sorted(HERE.glob(f"{label}-*.json"))
    return [{c["incumbents"]: c for c in json.loads(p.read_text())["counts"]} for p in paths]


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}–{max(values):.0f})"


def main() -> None:
    before, after = runs("before"), runs("after")
    print("| incumbents | tree | admit µs p50 | admit µs p99 | complete µs p50 "
          "| complete µs p99 |")
    print("|---|---|---|---|---|---|")
    for count in sorted(before[0]):
        for label, tree in (("before", before), ("after", after)):
            cells = [cell([run[count][field] for run in tree]) for field in FIELDS]
            print(f"| {count:,} | {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
