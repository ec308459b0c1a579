"""Print the table of docs/benchmarks.md, "The garbage collector's pauses", from the runs here.

    python docs/benchmarks/gc-walk/table.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def added(label: str) -> dict[str, list[float]]:
    rows: dict[str, list[float]] = {}
    for path in sorted(HERE.glob(f"{label}-run*.json")):
        for row in json.loads(path.read_text())["structures"]:
            rows.setdefault(row["structure"], []).append(row["added_ms"])
    return rows


def main() -> None:
    before, after = added("before"), added("after")
    blocks = {row["structure"]: row["blocks"]
              for row in json.loads((HERE / "after-run1.json").read_text())["structures"]}
    print("| structure | blocks | added to a full collection, before (ms, runs) | after |")
    print("|---|---|---|---|")
    for name in ("approximate", "exact", "ceiling"):
        print(f"| {name} | {blocks[name]:,} | "
              + " / ".join(f"{v:.1f}" for v in before[name]) + " | "
              + " / ".join(f"{v:.1f}" for v in after[name]) + " |")


if __name__ == "__main__":
    main()
