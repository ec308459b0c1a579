"""The runs of ``runs/`` side by side: router CPU µs per request (net of the idle rate) of
each target, phase and answer length, by tree (``old``: 3460c63, ``new``: e0e6eab, ``fix``:
e0e6eab with the send-timeout watch mended), in the order they ran; errors where any."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    runs = sorted((HERE / "runs").iterdir(), key=lambda p: (p / "load.txt").read_text().split()[1])
    cells: dict[tuple[str, str, str, str], list[str]] = {}
    values: dict[tuple[str, str, str, str], list[float]] = {}
    for run in runs:
        _, tree, tokens = run.name.split("-")
        for result in json.loads((run / "overhead.json").read_text())["results"]:
            for phase in ("non_stream", "stream"):
                measured = result[phase]
                key = (result["name"], tokens, phase, tree)
                errors = measured["load"]["errors"]
                net = measured["router_cpu_us_per_request_net"]
                cells.setdefault(key, []).append(
                    f"{net:,.0f}" + (f" ({errors} errors)" if errors else ""))
                if not errors:
                    values.setdefault(key, []).append(net)
    print("| target | tokens | phase | tree | router CPU µs/req net, each run | median |")
    print("|---|--:|---|---|---|--:|")
    trees = ("old", "new", "fix")
    for key in sorted(cells, key=lambda k: (k[0], int(k[1]), k[2], trees.index(k[3]))):
        shown = values.get(key)
        median = f"{statistics.median(shown):,.0f}" if shown else "–"
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {' / '.join(cells[key])} "
              f"| {median} |")


if __name__ == "__main__":
    main()
