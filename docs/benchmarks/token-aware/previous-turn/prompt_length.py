"""Whether a prompt's length says how long its answer will be, on the Azure code and Mooncake
traces: Spearman's rank correlation of prompt and output tokens, and the mean abs ln error of
predicting each answer by the geometric mean of its prompt-length class (powers of two,
learnt on the first half of the trace) against the first half's overall geometric mean,
both scored on the second half.

    python docs/benchmarks/token-aware/previous-turn/prompt_length.py --traces ../shared/traces
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from scipy.stats import spearmanr


def lengths(traces: Path) -> dict[str, list[tuple[int, int]]]:
    with gzip.open(traces / "azure_llm_2023_code.csv.gz", "rt", newline="") as fh:
        azure = [(int(r["ContextTokens"]), max(1, int(r["GeneratedTokens"])))
                 for r in csv.DictReader(fh)]
    with gzip.open(traces / "mooncake_conversation_trace.jsonl.gz", "rt") as fh:
        mooncake = [(r["input_length"], max(1, r["output_length"]))
                    for r in map(json.loads, fh)]
    return {"Azure code": azure, "Mooncake conversations": mooncake}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, required=True)
    args = parser.parse_args()
    print("| trace | requests | Spearman (prompt, output) | error by prompt-length class "
          "| error by the overall mean |")
    print("|---|--:|--:|--:|--:|")
    for name, pairs in lengths(args.traces).items():
        half = len(pairs) // 2
        logs: defaultdict[int, list[float]] = defaultdict(list)
        for prompt, output in pairs[:half]:
            logs[max(1, prompt).bit_length()].append(math.log(output))
        overall = statistics.fmean(math.log(o) for _, o in pairs[:half])
        by_class = {k: statistics.fmean(v) for k, v in logs.items()}
        tested = pairs[half:]
        class_error = statistics.fmean(
            abs(math.log(o) - by_class.get(max(1, p).bit_length(), overall)) for p, o in tested)
        mean_error = statistics.fmean(abs(math.log(o) - overall) for _, o in tested)
        rho = spearmanr([p for p, _ in pairs], [o for _, o in pairs]).statistic
        print(f"| {name} | {len(pairs):,} | {rho:.3f} | {class_error:.3f} | {mean_error:.3f} |")


if __name__ == "__main__":
    main()
