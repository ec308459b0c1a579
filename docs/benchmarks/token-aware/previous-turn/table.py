"""Print the table of docs/benchmarks.md "A conversation's previous turn" from the
summary.json files of this folder: the default profile (``kvroute``, the previous turn on)
against the same file with ``previous_turn: false`` (``noturn``), clients sending no
``max_tokens``, on three Mooncake slices."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SLICES = [("requests 1–1,000", "mooncake-skip0-none"),
          ("requests 6,001–7,000", "mooncake-skip6000-none"),
          ("requests 9,001–10,000", "mooncake-skip9000-none")]
POLICIES = [("previous turn on (`kvroute`)", "kvroute"), ("off (`noturn`)", "noturn")]


def main() -> None:
    print("| Mooncake, `--jitter 3` | output-length | predictions within 2 × | "
          "generated / predicted p50 | SLO met at × 1 | goodput ×rate | "
          "$/Mtok busy at goodput | prefix hit at × 1 |")
    print("|---|---|--:|--:|--:|--:|--:|--:|")
    for title, folder in SLICES:
        policies = json.loads((HERE / folder / "summary.json").read_text())["policies"]
        for label, name in POLICIES:
            entry = policies[name]
            p = entry["output_prediction"]
            print(f"| {title} | {label} | {p['within_2x']:.0%} | {p['ratio_p50']:.2f} "
                  f"| {entry['slo_attainment']:.1%} | {entry['goodput_rate_scale']:.2f} "
                  f"| {entry['goodput_cost_per_mtok_busy']:.3f} "
                  f"| {entry['prefix_hit_rate']:.1%} |")


if __name__ == "__main__":
    main()
