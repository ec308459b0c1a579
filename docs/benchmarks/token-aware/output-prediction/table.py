"""Print the table of docs/benchmarks.md "How far the output-length predictions are" from the
summary.json files of this folder (one kvroute run per slice and client setting)."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = [("Azure first 1,500", "azure-first1500"), ("Azure rows 4001–5500", "azure-rows4001-5500"),
        ("Mooncake first 1,000, `--jitter 3`", "mooncake-first1000-j3"),
        ("ServeGen deepseek-r1, span 0 s", "servegen-r1-span0")]


def main() -> None:
    print("| slice | clients send | predicted | generated / predicted p10 / p50 / p90 "
          "| within 2 × | SLO met | TPOT p99 ms |")
    print("|---|---|---|---|---|---|---|")
    for title, stem in RUNS:
        for mode in ("exact", "none", "4096"):
            path = HERE / f"{stem}-{mode}" / "summary.json"
            if not path.exists():
                continue
            entry = json.loads(path.read_text())["policies"]["kvroute"]
            p = entry["output_prediction"]
            print(f"| {title} | {mode} | {p['predicted']:,} ({p['share_of_completed']:.0%}) "
                  f"| {p['ratio_p10']:.2f} / {p['ratio_p50']:.2f} / {p['ratio_p90']:.2f} "
                  f"| {p['within_2x']:.0%} | {entry['slo_attainment']:.1%} "
                  f"| {entry['tpot_p99'] * 1000:.1f} |")


if __name__ == "__main__":
    main()
