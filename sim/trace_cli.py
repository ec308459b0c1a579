"""``kvroute trace``: make request traces for ``kvroute sim`` and ``kvroute bench replay``,
and read what a trace asks of a fleet's caches.

```
kvroute trace servegen --archive ../shared/traces/servegen/servegen_reason_deepseek-r1.tar.gz \\
    --start 0 --duration 600 [--seed N] --out servegen-r1.jsonl.gz
```

``servegen`` draws requests from ServeGen's per-client statistics (``sim.servegen``) and
writes them in the simulator's generic JSONL, one ``tenant`` per client. ``cache-curve``
(``sim.cache_curve_cli``) reads a trace's prefix reuse against cache sizes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

from sim import cache_curve_cli
from sim.cli import first_problem, range_problem


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "trace", help="make request traces for kvroute sim, or read their prefix reuse",
        description="Make request traces (the simulator's generic JSONL), or read how much "
                    "cache a trace's prefix reuse needs.")
    kinds = parser.add_subparsers(dest="trace_kind", metavar="KIND")
    servegen = kinds.add_parser(
        "servegen", help="draw requests from ServeGen's per-client statistics",
        description="Draw requests from ServeGen's per-client arrival and length "
                    "distributions (a .tar.gz of chunk-<client>-{trace.csv,dataset.json}, "
                    "or a folder of them).")
    servegen.add_argument("--archive", required=True,
                          help="ServeGen .tar.gz or folder with chunk-* files")
    servegen.add_argument("--start", type=float, default=0.0,
                          help="first second of the span, on ServeGen's clock, >= 0 "
                               "(default: 0)")
    servegen.add_argument("--duration", type=float, default=600.0,
                          help="seconds of the span (default: %(default)s)")
    servegen.add_argument("--seed", type=int, default=0,
                          help="seeds the arrivals and lengths (default: %(default)s)")
    servegen.add_argument("--out", required=True,
                          help="JSONL file to write (.gz: gzip); missing folders are made")
    servegen.set_defaults(func=main_servegen)
    cache_curve_cli.add_parser(kinds)
    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def main_servegen(args: argparse.Namespace) -> int:
    from sim.servegen import (
        RATE_WINDOW_S,
        ServeGenError,
        read_archive,
        servegen_requests,
        write_jsonl,
    )

    problem = first_problem(range_problem("--start", args.start, 0),
                            range_problem("--duration", args.duration, 0, inclusive=False))
    if problem:
        print(f"kvroute trace servegen: {problem}", file=sys.stderr)
        return 2
    try:
        workload = read_archive(args.archive)
        requests = servegen_requests(workload, args.start, args.duration, seed=args.seed)
    except ServeGenError as exc:
        print(f"kvroute trace servegen: {exc}", file=sys.stderr)
        return 2
    skipped = (f"; {len(workload.without_lengths)} client(s) without length distributions "
               "skipped" if workload.without_lengths else "")
    # the data ends where its last rate window does
    data_end = max(w.start_s for c in workload.clients for w in c.windows) + RATE_WINDOW_S
    if not requests:
        print(f"kvroute trace servegen: no request in [{args.start:g}, "
              f"{args.start + args.duration:g}) s (the data spans 0 to {data_end:g} s)"
              f"{skipped}; nothing written", file=sys.stderr)
        return 2
    try:
        write_jsonl(requests, args.out)
    except OSError as exc:
        print(f"kvroute trace servegen: --out: cannot write {args.out}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 2
    tenants = len({r.tenant for r in requests})
    # a span past the data's end has requests over its first part only
    covered = min(args.start + args.duration, data_end) - args.start
    cut = (f", the data ending at {data_end:g} s: {args.duration:g} s asked"
           if covered < args.duration else "")
    print(f"wrote {args.out}: {len(requests)} requests from {tenants} clients over "
          f"{covered:g} s ({len(requests) / covered:.2f} req/s{cut}); prompt tokens "
          f"mean {statistics.fmean(r.prompt_tokens for r in requests):.0f}, output tokens "
          f"mean {statistics.fmean(r.output_tokens for r in requests):.0f}{skipped}")
    return 0
