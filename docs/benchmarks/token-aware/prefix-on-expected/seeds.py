"""The reference slice (6 × H100, Mooncake's first 1,756 requests) under several seeds.

Each seed moves every arrival by a seeded delay in [0, ``--jitter``) s, as a live replay's
timing moves from run to run; the hit rates of one run depend on where the first turns of
conversations happened to land, so one run says little about a change of a point or two.
For each seed this runs ``kvroute sim`` on the given policies (unless ``--no-run``), then
prints per seed and on the mean each policy's SLO attainment and worker prefix-cache hit
rate, and the hit rate over round-robin's; then, on the mean, the share of the prompt tokens
cached on any worker and on the chosen one when each request was routed, and what the
decisions passed over by deciding term (``kvroute sim``'s "Where prefix hits are lost").

    python docs/benchmarks/token-aware/prefix-on-expected/seeds.py \
        --policies kvroute,/tmp/expected-off.yaml,round-robin --seeds 1-8 --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[4]
TRACE = REPO.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl.gz"


def seeds_of(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def run_seed(seed: int, args: argparse.Namespace) -> None:
    subprocess.run([sys.executable, "-m", "router.cli", "sim", "--trace", str(args.trace),
                    "--fleet", args.fleet, "--policies", args.policies,
                    "--limit", str(args.limit), "--jitter", str(args.jitter),
                    "--seed", str(seed), "--client-max-tokens", args.client_max_tokens,
                    "--jobs", "2", "--out", str(args.out / f"seed-{seed}")],
                   cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def table(args: argparse.Namespace, seeds: list[int]) -> str:
    rows: list[tuple[int, dict[str, dict[str, Any]]]] = []
    for seed in seeds:
        summary = json.loads((args.out / f"seed-{seed}" / "summary.json").read_text())
        rows.append((seed, summary["policies"]))
    names = list(rows[0][1])
    baseline = "round-robin" if "round-robin" in names else None
    head = ["seed"] + [f"{n} SLO / hit" + (" (× rr)" if baseline and n != baseline else "")
                       for n in names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(result: dict[str, Any], rr: float | None) -> str:
        text = f"{result['slo_attainment']:.1%} / {result['prefix_hit_rate']:.1%}"
        if rr:
            text += f" ({result['prefix_hit_rate'] / rr:.2f} ×)"
        return text

    for seed, results in rows:
        rr = results[baseline]["prefix_hit_rate"] if baseline else None
        lines.append("| " + " | ".join([str(seed)] + [
            cell(results[n], rr if n != baseline else None) for n in names]) + " |")
    means = {n: {key: statistics.fmean(r[n][key] for _, r in rows)
                 for key in ("slo_attainment", "prefix_hit_rate")} for n in names}
    rr_mean = means[baseline]["prefix_hit_rate"] if baseline else None
    lines.append("| mean | " + " | ".join(
        cell(means[n], rr_mean if n != baseline else None) for n in names) + " |")
    lines.append("")
    for name in names:      # where the prefix was lost: in the caches, or in the decisions
        anywhere = statistics.fmean(r[name]["prefix_cached_anywhere"] for _, r in rows)
        chosen = statistics.fmean(r[name]["prefix_cached_chosen"] for _, r in rows)
        terms: dict[str, float] = {}
        for _, r in rows:
            for term, share in r[name]["prefix_passed_over_by_term"].items():
                terms[term] = terms.get(term, 0.0) + share / len(rows)
        passed = ", ".join(f"{term} {share:.1%}" for term, share in
                           sorted(terms.items(), key=lambda item: -item[1]) if share >= 0.0005)
        lines.append(f"{name}: cached anywhere {anywhere:.1%}, on the chosen worker "
                     f"{chosen:.1%}; passed over, by deciding term: {passed or 'none'}")
    if baseline:
        for name in names:
            if name == baseline:
                continue
            ratios = [r[name]["prefix_hit_rate"] / r[baseline]["prefix_hit_rate"]
                      for _, r in rows]
            lines.append(f"\n{name}: hit rate ≥ 2 × round-robin's in "
                         f"{sum(x >= 2.0 for x in ratios)} of {len(ratios)} seeds "
                         f"({min(ratios):.2f}–{max(ratios):.2f} ×)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", required=True, help="as kvroute sim's --policies")
    parser.add_argument("--seeds", default="1-8", help="a seed or a range (default 1-8)")
    parser.add_argument("--jitter", type=float, default=0.5)
    parser.add_argument("--limit", type=int, default=1756)
    parser.add_argument("--fleet", default="config/fleets/reference-h100.yaml")
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--client-max-tokens", default="exact",
                        help="as kvroute sim's (default exact)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-run", dest="run", action="store_false",
                        help="only read the runs already in --out")
    args = parser.parse_args()
    args.out = args.out.resolve()
    seeds = seeds_of(args.seeds)
    if args.run:
        for seed in seeds:
            print(f"seed {seed}", file=sys.stderr, flush=True)
            run_seed(seed, args)
    print(table(args, seeds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
