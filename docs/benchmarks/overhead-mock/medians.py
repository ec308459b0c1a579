"""Median and range of each target over several runs of ``kvroute bench overhead``.

``python docs/benchmarks/overhead-mock/medians.py RUN_DIR...`` reads each ``overhead.json``
and prints a Markdown table: per target, the median over the runs with the lowest and highest
value in brackets, for throughput, latency and router CPU per request (net of the idle rate
in a second column). Writes nothing.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

Pick = Callable[[dict[str, Any]], float | None]

COLUMNS: tuple[tuple[str, Pick, int], ...] = (
    ("Non-stream req/s", lambda r: r["non_stream"]["load"]["requests_per_s"], 0),
    ("p50 ms", lambda r: r["non_stream"]["load"]["latency_p50_ms"], 2),
    ("Router CPU %", lambda r: r["non_stream"]["router_cpu_percent"], 0),
    ("Router CPU µs/req", lambda r: r["non_stream"]["router_cpu_us_per_request"], 0),
    ("net", lambda r: r["non_stream"]["router_cpu_us_per_request_net"], 0),
    ("Stream req/s", lambda r: r["stream"]["load"]["requests_per_s"], 0),
    ("TTFC p99 ms", lambda r: r["stream"]["load"]["ttfc_p99_ms"], 1),
    ("Stream CPU %", lambda r: r["stream"]["router_cpu_percent"], 0),
    ("Stream CPU µs/req", lambda r: r["stream"]["router_cpu_us_per_request"], 0),
    ("net", lambda r: r["stream"]["router_cpu_us_per_request_net"], 0),
    ("Errors", lambda r: r["non_stream"]["load"]["errors"] + r["stream"]["load"]["errors"], 0),
)


def cell(values: list[float], digits: int) -> str:
    if not values:
        return "–"
    median = statistics.median(values)
    text = f"{median:,.{digits}f}"
    if min(values) == max(values):
        return text
    return f"{text} ({min(values):,.{digits}f}–{max(values):,.{digits}f})"


def table(runs: list[dict[str, Any]]) -> str:
    names = [r["name"] for r in runs[0]["results"]]
    head = "| Target | " + " | ".join(title for title, _, _ in COLUMNS) + " |"
    rows = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    for name in names:
        found = [r for run in runs for r in run["results"]
                 if r["name"] == name and r["skipped"] is None]
        if not found:
            rows.append(f"| {name} | skipped |" + " |" * (len(COLUMNS) - 1))
            continue
        cells = []
        for _, pick, digits in COLUMNS:
            values = [v for v in (pick(r) for r in found) if v is not None]
            cells.append(cell(values, digits))
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def main(folders: list[str]) -> None:
    runs = [orjson.loads((Path(folder) / "overhead.json").read_bytes()) for folder in folders]
    print(f"Medians over {len(runs)} runs (lowest–highest in brackets).\n")
    print(table(runs), end="")


if __name__ == "__main__":
    main(sys.argv[1:])
