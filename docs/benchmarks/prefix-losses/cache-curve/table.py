"""Prints the Markdown table of docs/benchmarks.md, "How much cache the ceiling needs", from
the ``cache_curve.json`` of each folder here and kvroute's hit rate in the committed
scorecard (``docs/benchmarks/token-aware/scorecard/<case>/summary.json``) where one exists.

    python docs/benchmarks/prefix-losses/cache-curve/table.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCORECARD = HERE.parents[1] / "token-aware" / "scorecard"
ROWS = (("mooncake-1-1000", "Mooncake 1–1,000, `--jitter 3`"),
        ("mooncake-6001-7000", "Mooncake 6,001–7,000, `--jitter 3`"),
        ("mooncake-9001-10000", "Mooncake 9,001–10,000, `--jitter 3`"),
        ("mooncake-whole-bench-mixed", "Mooncake, all 12,031"),
        ("mooncake-1-1756-reference-h100", "Mooncake 1–1,756 (the live slice)"))


def main() -> None:
    print("| requests | fleet (KV tokens) | ceiling | LRU at the fleet's KV | optimal at it "
          "| LRU needs for 0.85 × | optimal needs for 0.85 × | kvroute (scorecard) |")
    print("|---|---|--:|--:|--:|--:|--:|--:|")
    for folder, label in ROWS:
        report = json.loads((HERE / folder / "cache_curve.json").read_text())
        ceiling = report["ceiling"]
        at_kv = next(p for p in report["points"] if p["multiple"] == 1.0)
        needed = next(n for n in report["needed"] if n["share"] == 0.85)
        summary = SCORECARD / folder / "summary.json"
        ours = "–"
        if summary.exists():
            hits = json.loads(summary.read_text())["policies"]["kvroute"]["prefix_hit_rate"]
            ours = f"{hits:.1%} ({hits / ceiling:.2f} ×)"
        fleet = report["fleet"]
        print(f"| {label} | `{fleet['name']}` ({fleet['kv_tokens']:,}) | {ceiling:.1%} | "
              f"{at_kv['lru_rate']:.1%} ({at_kv['lru_rate'] / ceiling:.2f} ×) | "
              f"{at_kv['optimal_rate']:.1%} ({at_kv['optimal_rate'] / ceiling:.2f} ×) | "
              f"{needed['lru_multiple']:.2f} × its KV | {needed['optimal_multiple']:.2f} × | "
              f"{ours} |")


if __name__ == "__main__":
    main()
