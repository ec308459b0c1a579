"""Mooncake slices on the mixed fleet (``bench-mixed``), ``--jitter 3``, several seeds, with
the goodput search: each policy's goodput (the largest rate scale with ≥ 90 % SLO
attainment), SLO attainment and prefix-cache hit rate at × 1.0, and busy cost per Mtok at its
goodput, per slice and seed and on the mean.

A slice ``A-B`` is the trace's rows A to B (1-based), its timestamps moved to start at 0;
``first1000`` is its first 1,000 rows. Runs go to ``--out``/SLICE-seedN (unless
``--no-run``, which only reads them).

    python docs/benchmarks/token-aware/prefix-on-expected/mixed.py \
        --policies kvroute,docs/benchmarks/token-aware/prefix-on-expected/expected-off.yaml \
        --slices first1000,6001-7000,9001-10000,11001-12000 --seeds 0-2 --out DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from seeds import seeds_of  # this folder's seeds.py (the script's own folder is on sys.path)

REPO = Path(__file__).resolve().parents[4]
TRACE = REPO.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl.gz"
METRICS = (("goodput_rate_scale", "goodput", "{:.2f}"), ("slo_attainment", "SLO", "{:.1%}"),
           ("prefix_hit_rate", "hit", "{:.1%}"), ("goodput_cost_per_mtok_busy",
                                                  "$/Mtok at goodput", "{:.3f}"))


def write_slice(name: str, folder: Path) -> Path:
    first, last = (1, 1000) if name == "first1000" else map(int, name.split("-"))
    with gzip.open(TRACE, "rt") as source:
        rows = [json.loads(line) for line in source][first - 1:last]
    start = rows[0]["timestamp"]
    path = folder / f"mooncake-{name}.jsonl.gz"
    with gzip.open(path, "wt") as sink:
        for row in rows:
            row["timestamp"] -= start
            sink.write(json.dumps(row) + "\n")
    return path


def run(args: argparse.Namespace, slices: list[str], seeds: list[int]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        for name in slices:
            trace = write_slice(name, Path(scratch))
            for seed in seeds:
                print(f"{name} seed {seed}", file=sys.stderr, flush=True)
                subprocess.run([
                    sys.executable, "-m", "router.cli", "sim", "--trace", str(trace),
                    "--trace-format", "mooncake", "--fleet", "config/fleets/bench-mixed.yaml",
                    "--policies", args.policies, "--jitter", "3", "--seed", str(seed),
                    "--goodput", "--jobs", "2", "--out", str(args.out / f"{name}-seed{seed}")],
                    cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def table(args: argparse.Namespace, slices: list[str], seeds: list[int]) -> str:
    runs = {(name, seed): json.loads(
        (args.out / f"{name}-seed{seed}" / "summary.json").read_text())["policies"]
        for name in slices for seed in seeds}
    names = list(next(iter(runs.values())))
    head = ["slice", "seed"] + [f"{policy}: {label}" for policy in names
                                for _, label, _ in METRICS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cells(values: dict[str, dict[str, float | None]]) -> list[str]:
        return [fmt.format(value) if (value := values[policy][key]) is not None else "–"
                for policy in names for key, _, fmt in METRICS]

    for (name, seed), results in runs.items():
        lines.append("| " + " | ".join([name, str(seed), *cells(results)]) + " |")
    means: dict[str, dict[str, float | None]] = {}
    for policy in names:
        means[policy] = {}
        for key, _, _ in METRICS:
            values = [r[policy][key] for r in runs.values() if r[policy][key] is not None]
            means[policy][key] = statistics.fmean(values) if values else None
    lines.append("| mean | | " + " | ".join(cells(means)) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", required=True, help="as kvroute sim's --policies")
    parser.add_argument("--slices", default="first1000,6001-7000,9001-10000,11001-12000")
    parser.add_argument("--seeds", default="0-2", help="a seed or a range (default 0-2)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-run", dest="run", action="store_false",
                        help="only read the runs already in --out")
    args = parser.parse_args()
    args.out = args.out.resolve()
    slices = [s for s in args.slices.split(",") if s]
    seeds = seeds_of(args.seeds)
    if args.run:
        run(args, slices, seeds)
    print(table(args, slices, seeds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
