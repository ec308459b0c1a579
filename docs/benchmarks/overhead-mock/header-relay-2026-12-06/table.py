"""The runs of this folder side by side: router CPU per request of each target, by tree
(``base``: 1c02d5e, ``head``: the tree with the header relay), in the order they ran."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["base-run1", "head-run1", "base-run2", "head-run2", "base-run3", "head-run3",
         "head-run4", "base-run4", "head-run5", "base-run5", "head-run6", "base-run6"]


def main() -> None:
    cells: dict[tuple[str, str, str], list[float]] = {}
    for run in ORDER:
        results = json.loads((HERE / run / "overhead.json").read_text())["results"]
        for result in results:
            for phase in ("non_stream", "stream"):
                key = (result["name"], phase, run.split("-")[0])
                cells.setdefault(key, []).append(
                    result[phase]["router_cpu_us_per_request_net"])
    print("| target | phase | tree | router CPU µs/req, each run | median |")
    print("|---|---|---|---|--:|")
    for (target, phase, tree), values in sorted(cells.items()):
        runs = " / ".join(f"{v:.0f}" for v in values)
        print(f"| {target} | {phase} | {tree} | {runs} | {statistics.median(values):.0f} |")


if __name__ == "__main__":
    main()
