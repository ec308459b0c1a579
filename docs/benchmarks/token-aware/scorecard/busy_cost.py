"""Where a simulated run's busy GPU cost goes: each worker's busy time split by how many
requests it was serving (1, 2-4, 5-16, 17 or more) and by phase (while requests still arrive,
or the drain after the last arrival), priced at the worker's $/h from the run's summary.

A worker is busy from a request's start (arrival plus queueing) to its end (arrival plus
end-to-end latency), as ``kvroute sim`` bills ``cost_usd_busy``. Reads the per-request rows
``kvroute sim`` writes (``requests/<policy>.csv``, or the same gzipped).

    python docs/benchmarks/token-aware/scorecard/busy_cost.py \
        docs/benchmarks/token-aware/scorecard/servegen-r1-43200-300 --policies kvroute,llm-d-default
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
from collections import defaultdict
from pathlib import Path

BUCKETS = ((1, "1"), (4, "2-4"), (16, "5-16"), (10**9, "17+"))


def bucket(serving: int) -> str:
    return next(name for top, name in BUCKETS if serving <= top)


def read_rows(directory: Path, policy: str) -> list[dict[str, str]]:
    plain = directory / "requests" / f"{policy}.csv"
    with (plain.open(newline="") if plain.is_file()
          else gzip.open(plain.with_suffix(".csv.gz"), "rt", newline="")) as fh:
        return list(csv.DictReader(fh))


def busy_cost(rows: list[dict[str, str]], price_per_h: dict[str, float]
              ) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """(seconds, dollars) by (phase, serving bucket), summed over the workers."""
    served = [r for r in rows if not r["reject_reason"]]
    last_arrival = max(float(r["arrival_s"]) for r in served)
    spans: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for r in served:
        start = float(r["arrival_s"]) + float(r["queue_s"])
        spans[r["worker_id"]] += [(start, 1), (float(r["arrival_s"]) + float(r["e2e_s"]), -1)]
    seconds: defaultdict[tuple[str, str], float] = defaultdict(float)
    dollars: defaultdict[tuple[str, str], float] = defaultdict(float)
    for worker, events in spans.items():
        serving, previous = 0, 0.0
        for at, change in sorted(events):
            if serving > 0:
                # a stretch that crosses the last arrival is split at it
                for lo, hi, phase in ((previous, min(at, last_arrival), "arrivals"),
                                      (max(previous, last_arrival), at, "drain")):
                    if hi > lo:
                        key = (phase, bucket(serving))
                        seconds[key] += hi - lo
                        dollars[key] += (hi - lo) * price_per_h[worker] / 3600
            serving += change
            previous = at
    return seconds, dollars


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a kvroute sim output directory")
    parser.add_argument("--policies", default="kvroute")
    args = parser.parse_args()
    summary = json.loads((args.run / "summary.json").read_text())
    price = {w["id"]: w["price_per_hour"] for w in summary["fleet"]["workers"]}
    print("| policy | phase | serving | busy s | busy $ | share of busy $ |")
    print("|---|---|---|--:|--:|--:|")
    for policy in args.policies.split(","):
        seconds, dollars = busy_cost(read_rows(args.run, policy), price)
        total = sum(dollars.values())
        for phase in ("arrivals", "drain"):
            for _, name in BUCKETS:
                key = (phase, name)
                print(f"| {policy} | {phase} | {name} | {seconds[key]:,.0f} | "
                      f"{dollars[key]:.2f} | {dollars[key] / total:.1%} |")
        drain = sum(v for (phase, _), v in dollars.items() if phase == "drain")
        print(f"| {policy} | all | all | {sum(seconds.values()):,.0f} | {total:.2f} | "
              f"drain {drain / total:.1%} |")


if __name__ == "__main__":
    main()
