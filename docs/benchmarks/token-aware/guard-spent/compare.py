"""kvroute's row of each case in two or more scorecard folders, side by side.

    cd docs/benchmarks/token-aware/guard-spent
    python compare.py base-exact ign-exact base-none ign-none
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def row(folder: Path, case: str) -> str:
    summary = folder / case / "summary.json"
    if not summary.exists():
        return "–"
    result = json.loads(summary.read_text())["policies"]["kvroute"]
    passed = (result.get("prefix_passed_over_by_term") or {}).get("protect-decodes", 0.0)
    return (f"{result['goodput_rate_scale']:.3f} / {result['slo_attainment']:.1%} / "
            f"{result['prefix_hit_rate']:.1%} / {result['goodput_cost_per_mtok_busy']:.3f} / "
            f"{passed:.2%}")


def main(argv: list[str]) -> int:
    folders = [Path(a) for a in argv]
    cases = sorted(p.name for p in folders[0].iterdir() if (p / "summary.json").exists())
    print("| case | " + " | ".join(f.name for f in folders) + " |")
    print("|---|" + "---|" * len(folders))
    for case in cases:
        print(f"| {case} | " + " | ".join(row(f, case) for f in folders) + " |")
    print("\nEach cell: goodput × rate / SLO met at × 1 / prefix hit at × 1 / $ per busy Mtok at "
          "goodput / prompt tokens passed over by protect-decodes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
