"""A Markdown table of several ``bench.decision`` runs side by side (an A/B of two trees).

Each run is one ``decision.json``. Runs are grouped by a label taken from the file name
(``before-run1.json`` → ``before``; ``after-16k-run2.json`` → ``after-16k``), and each
fleet size gets one row per label with every run's CPU p50 and p99, in run order::

    python -m bench.decision_table docs/benchmarks/token-aware/decision-bisect \\
        --labels before,after,before-16k,after-16k
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

_RUN = re.compile(r"^(?P<label>.+?)-run(?P<number>\d+)\.json$")


def load_runs(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Label → the runs' reports, in run-number order."""
    found: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for path in directory.glob("*.json"):
        match = _RUN.match(path.name)
        if match is None:
            continue
        report = json.loads(path.read_text())
        if not isinstance(report, dict) or "sizes" not in report:
            raise ValueError(f"{path}: not a bench.decision report (no 'sizes')")
        found.setdefault(match["label"], []).append((int(match["number"]), report))
    return {label: [report for _, report in sorted(runs, key=lambda run: run[0])]
            for label, runs in found.items()}


def table(runs: dict[str, list[dict[str, Any]]], order: list[str] | None = None) -> str:
    """One row per prompt length, fleet size and label (labels in ``order``, else by name):
    the CPU p50 and p99 of every run, the CPU of ``on_routed`` and the young collections'
    median pause when every run has them."""
    labels = order if order is not None else sorted(runs)
    every = [size for reports in runs.values() for report in reports for size in report["sizes"]]
    # reports that time on_routed too get a column for it (older ones do not)
    routed = bool(every) and all("routed_p50_us" in size for size in every)
    young = bool(every) and all("young_pause_p50_us" in size for size in every)
    keys = (("cpu_p50_us", "cpu_p99_us") + (("routed_p50_us",) if routed else ())
            + (("young_pause_p50_us",) if young else ()))
    rows: list[tuple[int, int, int, str]] = []
    for rank, label in enumerate(labels):
        reports = runs.get(label)
        if not reports:
            raise ValueError(f"no runs labelled {label!r} (found: {', '.join(sorted(runs))})")
        for prompt in sorted({report["prompt_tokens"] for report in reports}):
            sizes = [size for report in reports if report["prompt_tokens"] == prompt
                     for size in report["sizes"]]
            for workers in sorted({size["workers"] for size in sizes}):
                chosen = [size for size in sizes if size["workers"] == workers]
                cells = [" / ".join(f"{size[key]:.0f}" for size in chosen) for key in keys]
                rows.append((prompt, workers, rank,
                             f"| {prompt} | {workers} | {label} | {' | '.join(cells)} |"))
    header = "| prompt tokens | workers | label | CPU p50 µs (runs) | CPU p99 µs (runs) |"
    rule = "|---|---|---|---|---|"
    if routed:
        header += " on_routed CPU p50 µs (runs) |"
        rule += "---|"
    if young:
        header += " young collection CPU p50 µs (runs) |"
        rule += "---|"
    lines = [header, rule]
    lines.extend(row[3] for row in sorted(rows))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decision_table",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("directory", type=Path, help="folder of LABEL-runN.json files")
    parser.add_argument("--labels", default=None,
                        help="comma-separated labels, in the order to show them (default: all, "
                             "by name)")
    args = parser.parse_args(argv)
    if not args.directory.is_dir():
        print(f"error: {args.directory} is not a folder", file=sys.stderr)
        return 2
    try:
        runs = load_runs(args.directory)
    except ValueError as exc:     # a file that is no report (or no JSON at all)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not runs:
        print(f"error: no LABEL-runN.json files in {args.directory}", file=sys.stderr)
        return 2
    order = [label.strip() for label in args.labels.split(",")] if args.labels else None
    try:
        print(table(runs, order))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
