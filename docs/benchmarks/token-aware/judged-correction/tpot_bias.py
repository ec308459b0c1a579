"""Which way the raw TPOT estimate errs on a trace, and how far the online correction moves it.

Simulates the trace with the default profile on the mixed fleet (``policies.latency.evaluate``'s
``collect``) and prints, over the finished requests with a TPOT: the mean and the median of
ln(observed / raw estimate), the mean ln(corrected / raw) of the estimates the router used, and
the share of requests whose TPOT the correction raised.

    python docs/benchmarks/token-aware/judged-correction/tpot_bias.py \\
        --trace /tmp/r1-43200.jsonl.gz --rate-scale 1.0
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", required=True)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--rate-scale", type=float, default=1.0)
    parser.add_argument("--fleet", default=str(REPO / "config" / "fleets" / "bench-mixed.yaml"))
    parser.add_argument("--routing", default=str(REPO / "config" / "routing.yaml"))
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from policies.latency.evaluate import collect

    samples = [s for s in collect(args.trace, args.fleet, args.routing, args.limit,
                                  args.rate_scale, 0) if s.observed_tpot_s]
    if not samples:
        print("no finished request with a TPOT", file=sys.stderr)
        return 1
    observed = [math.log((s.observed_tpot_s or 0.0) / s.raw_tpot_s) for s in samples]
    corrected = [math.log(s.tpot_s / s.raw_tpot_s) for s in samples]
    print(f"{args.trace} x{args.rate_scale}: {len(samples)} requests; ln(observed/raw) mean "
          f"{statistics.fmean(observed):+.3f}, median {statistics.median(observed):+.3f}; "
          f"ln(corrected/raw) mean {statistics.fmean(corrected):+.3f}; raised by the "
          f"correction: {sum(c > 0 for c in corrected) / len(corrected):.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
