"""Held-back error of every TTFT/TPOT estimator (``python -m policies.latency.evaluate``) on
several slices of the public traces, on the mixed fleet, and one Markdown table of them.

Cases: Azure code's first 1,500 requests (× 1.0); Mooncake's first 1,000 and rows
6001–7000, 9001–10000 and 11001–12000 (× 0.5); 300 s of ServeGen's deepseek-r1 traffic
from 43,200 s (× 0.5). Each case's report goes to ``--out``/CASE/latency_eval.json (unless
``--no-run``, which only reads them); the table goes to ``--out``/table.md and stdout.

    python docs/benchmarks/token-aware/ttft-regimes/latency.py \\
        --out docs/benchmarks/token-aware/ttft-regimes/latency
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
TRACES = REPO.parent / "shared" / "traces"
MOONCAKE = TRACES / "mooncake_conversation_trace.jsonl.gz"
CASES = ("azure-first1500", "mooncake-first1000", "mooncake-6001-7000", "mooncake-9001-10000",
         "mooncake-11001-12000", "servegen-r1-43200")
ESTIMATORS = (("raw_model", "raw model"), ("online_corrected", "online (routed)"),
              ("online_per_worker", "online, per worker"),
              ("online_per_regime", "online, per regime"),
              ("online_judged", "online, judged"),
              ("sklearn_linear", "scikit-learn linear"), ("sklearn_gbr", "scikit-learn GBR"))


def mooncake_rows(first: int, last: int, path: Path) -> Path:
    """Rows ``first``..``last`` (1-based) of the Mooncake trace, timestamps from 0."""
    with gzip.open(MOONCAKE, "rt") as source:
        rows = [json.loads(line) for line in source][first - 1:last]
    start = rows[0]["timestamp"]
    with gzip.open(path, "wt") as sink:
        for row in rows:
            row["timestamp"] -= start
            sink.write(json.dumps(row) + "\n")
    return path


def arguments(case: str, scratch: Path) -> list[str]:
    """The evaluate arguments of one case (writing its trace into ``scratch`` if needed)."""
    if case == "azure-first1500":
        return ["--trace", str(TRACES / "azure_llm_2023_code.csv.gz"), "--limit", "1500",
                "--rate-scale", "1.0"]
    if case.startswith("mooncake-"):
        span = case.removeprefix("mooncake-")
        first, last = (1, 1000) if span == "first1000" else map(int, span.split("-"))
        trace = mooncake_rows(first, last, scratch / f"{case}.jsonl.gz")
        return ["--trace", str(trace), "--limit", "1000", "--rate-scale", "0.5"]
    trace = scratch / f"{case}.jsonl.gz"
    subprocess.run([sys.executable, "-m", "router.cli", "trace", "servegen", "--archive",
                    str(TRACES / "servegen" / "servegen_reason_deepseek-r1.tar.gz"),
                    "--start", "43200", "--duration", "300", "--out", str(trace)],
                   cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return ["--trace", str(trace), "--limit", "2000", "--rate-scale", "0.5"]


def table(out: Path) -> str:
    lines = ["| case | metric | n | " + " | ".join(label for _, label in ESTIMATORS) + " |",
             "|---|---|--:|" + "--:|" * len(ESTIMATORS)]
    for case in CASES:
        report = json.loads((out / case / "latency_eval.json").read_text())
        for metric in ("ttft", "tpot"):
            results = report[metric]
            best = min(v["mean_abs_log"] for v in results.values())
            cells = []
            for key, _ in ESTIMATORS:
                value = results.get(key, {}).get("mean_abs_log")
                text = "–" if value is None else f"{value:.3f}"
                cells.append(f"**{text}**" if value == best else text)
            lines.append(f"| {case} | {metric.upper()} | {results['raw_model']['n']:.0f} | "
                         + " | ".join(cells) + " |")
    timings = [json.loads((out / case / "latency_eval.json").read_text())[metric]["sklearn_gbr"]
               .get("predict_10_rows_us") for case in CASES for metric in ("ttft", "tpot")]
    known = [t for t in timings if t is not None]
    if known:
        lines.append(f"\nscikit-learn GBR `predict` on ten rows (median of 200 calls, "
                     f"per case and metric): {min(known):.0f}–{max(known):.0f} µs")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-run", action="store_true", help="only read earlier runs")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if not args.no_run:
        with tempfile.TemporaryDirectory() as scratch:
            for case in CASES:
                print(f"[latency] {case}", file=sys.stderr, flush=True)
                subprocess.run([sys.executable, "-m", "policies.latency.evaluate",
                                *arguments(case, Path(scratch)), "--out", str(out / case)],
                               cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    text = table(out)
    (out / "table.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
