"""``kvroute trace cache-curve``: how much cache a trace's prefix reuse needs.

```
kvroute trace cache-curve --trace ../shared/traces/mooncake_conversation_trace.jsonl.gz \\
    --fleet config/fleets/bench-mixed.yaml --limit 1000 --jitter 3 [--skip N] [--duration S]
    [--seed N] [--multiples 0.1,0.5,1,2] [--shares 0.85,0.9] [--out DIR]
kvroute trace cache-curve --trace T --kv-tokens 2800000     # a live fleet's KV, as measured
```

Slices the trace as ``kvroute sim`` does, sizes the fleet's KV as the simulator sizes its
engines (or takes ``--kv-tokens``: a real fleet's, from its engines), and prints the prefix
hit rate of one pooled cache at multiples of that size, with LRU eviction (vLLM's) and with
the optimal evictions (``sim.cache_curve``), then the cache each needs to reach shares of
the infinite-cache ceiling. ``--out`` also writes
``cache_curve.json``, ``cache_curve.md`` and ``cache_curve.png`` (both curves over a fine
grid, the ceiling and the fleet's KV marked).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DEFAULT_MULTIPLES = (0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
DEFAULT_SHARES = (0.85, 0.9, 0.95)
PLOT_POINTS = 33            # log-spaced multiples from 1/64 to 8 for the plot


def add_parser(kinds: Any) -> None:
    parser = kinds.add_parser(
        "cache-curve", help="prefix hit rate against cache size (LRU and optimal)",
        description="Prefix hit rate of one pooled KV cache at multiples of the fleet's KV, "
                    "with LRU eviction (vLLM's) and with the optimal evictions (Belady's, "
                    "known only offline), and the cache each needs for shares of the "
                    "infinite-cache ceiling.")
    parser.add_argument("--trace", required=True,
                        help="Mooncake JSONL, Azure CSV or generic JSONL (.gz ok)")
    parser.add_argument("--trace-format", default="auto",
                        choices=["auto", "mooncake", "azure", "jsonl"],
                        help="as kvroute sim's (default: %(default)s)")
    unit = parser.add_mutually_exclusive_group(required=True)
    unit.add_argument("--fleet",
                      help="fleet YAML whose KV capacity, as the simulator sizes its engines, "
                           "is the unit of the cache sizes")
    unit.add_argument("--kv-tokens", type=int, default=None, metavar="N",
                      help="instead, the fleet's KV in tokens: for real vLLM engines the sum "
                           "of num_gpu_blocks x block_size over the workers (/debug/fleet), or "
                           "of the 'GPU KV cache size: N tokens' each logs at start")
    parser.add_argument("--skip", type=int, default=0, metavar="N",
                        help="leave out the first N requests (default: %(default)s)")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="the first N requests only")
    parser.add_argument("--duration", type=float, default=None, metavar="S",
                        help="the requests of the first S seconds only")
    parser.add_argument("--jitter", type=float, default=0.0, metavar="S",
                        help="as kvroute sim's: a seeded delay in [0, S) s on every arrival")
    parser.add_argument("--seed", type=int, default=0, help="seeds --jitter (default: 0)")
    parser.add_argument("--multiples", default=",".join(f"{m:g}" for m in DEFAULT_MULTIPLES),
                        help="cache sizes as multiples of the fleet's KV, comma-separated "
                             "(default: %(default)s)")
    parser.add_argument("--shares", default=",".join(f"{s:g}" for s in DEFAULT_SHARES),
                        help="shares of the infinite-cache ceiling to find the cache for "
                             "(default: %(default)s)")
    parser.add_argument("--out", default=None, help="directory for the JSON, table and plot")
    parser.set_defaults(func=main)


@dataclass(frozen=True, slots=True)
class NeededCache:
    share: float
    lru_tokens: int | None            # None: not even with every distinct block kept
    lru_multiple: float | None        # of the fleet's KV
    optimal_tokens: int | None
    optimal_multiple: float | None


def main(args: argparse.Namespace) -> int:
    from sim.cli import out_problem
    from sim.simulator import fleet_kv_tokens
    from sim.traces import TraceError, load_trace
    from workers.fleet import FleetConfigError, load_fleet

    try:
        multiples = _numbers(args.multiples, "--multiples", upper=None)
        shares = _numbers(args.shares, "--shares", upper=1.0)
        if args.limit is not None and args.limit < 1:
            raise ValueError("--limit: must be at least 1")
        if args.kv_tokens is not None and args.kv_tokens < 1:
            raise ValueError("--kv-tokens: must be at least 1")
        kv_tokens = (args.kv_tokens if args.kv_tokens is not None
                     else fleet_kv_tokens(load_fleet(args.fleet)))
        trace = load_trace(args.trace, fmt=args.trace_format, limit=args.limit,
                           duration_s=args.duration, seed=args.seed, jitter_s=args.jitter,
                           skip=args.skip)
        problem = out_problem(args.out)     # before the curve is computed, not after
        if problem:
            raise ValueError(problem)
    except (ValueError, TraceError, FleetConfigError, OSError) as exc:
        print(f"kvroute trace cache-curve: {exc}", file=sys.stderr)
        return 2
    if not trace.requests:
        print(f"kvroute trace cache-curve: {args.trace}: no requests after slicing",
              file=sys.stderr)
        return 2
    fleet_name = Path(args.fleet).name if args.fleet is not None else None
    report = cache_report(trace, kv_tokens, multiples, shares,
                          trace_name=Path(args.trace).name, fleet_name=fleet_name,
                          progress=_progress)
    text = markdown(report)
    print(text, end="")
    if args.out is not None:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "cache_curve.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / "cache_curve.md").write_text(text)
        plot(report, out / "cache_curve.png")
        print(f"wrote {out / 'cache_curve.json'}, cache_curve.md and cache_curve.png",
              file=sys.stderr)
    return 0


def _progress(stage: str) -> None:
    print(f"[cache-curve] {stage}", file=sys.stderr, flush=True)


def _numbers(text: str, option: str, upper: float | None) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{option}: comma-separated numbers, got {text!r}") from None
    if not values:
        raise ValueError(f"{option}: at least one number")
    for value in values:
        if not value > 0 or (upper is not None and value > upper):
            bound = f"in (0, {upper:g}]" if upper is not None else "> 0"
            raise ValueError(f"{option}: each must be {bound}, got {value:g}")
    return values


def cache_report(trace: Any, fleet_kv: int, multiples: Sequence[float],
                 shares: Sequence[float], *, trace_name: str, fleet_name: str | None,
                 progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Everything the command prints and writes, as JSON-ready values (``fleet_name``: None
    when ``fleet_kv`` was given, not read from a fleet file; ``progress``: told each stage
    as it starts)."""
    from sim.cache_curve import (
        block_accesses,
        capacity_for,
        curve,
        infinite_hits,
        lru_hits,
        optimal_hits,
        rate,
    )

    say = progress if progress is not None else (lambda stage: None)
    accesses = block_accesses(trace)
    best = infinite_hits(accesses)
    report: dict[str, Any] = {
        "trace": {"name": trace_name, "requests": len(trace.requests),
                  "prompt_tokens": accesses.prompt_tokens,
                  "block_tokens": accesses.block_tokens,
                  "distinct_blocks": accesses.distinct_blocks},
        "fleet": {"name": fleet_name, "kv_tokens": fleet_kv},
        "ceiling": rate(accesses, best),
        "points": [], "needed": [], "plot": [],
    }
    if best == 0 or fleet_kv <= 0:
        return report          # nothing is ever reused, or no cache to measure against
    say(f"{len(accesses.keys):,} block reads of {len(trace.requests):,} requests: "
        f"{len(multiples)} cache sizes")
    report["points"] = [asdict(p) for p in curve(accesses, fleet_kv, multiples)]
    say(f"{PLOT_POINTS} cache sizes for the plot")
    report["plot"] = [asdict(p) for p in curve(
        accesses, fleet_kv, [2.0 ** (k / 4 - 6) for k in range(PLOT_POINTS)])]
    most, size = accesses.distinct_blocks, accesses.block_tokens
    for share in shares:
        say(f"the cache for {share:.0%} of the ceiling")
        wanted = -(-best * round(share * 10_000) // 10_000)       # ceil(best × share)
        lru = capacity_for(lambda b: lru_hits(accesses, b), wanted, most)
        optimal = capacity_for(lambda b: optimal_hits(accesses, b).reached, wanted, most)
        report["needed"].append(asdict(NeededCache(
            share, lru * size if lru >= 0 else None,
            lru * size / fleet_kv if lru >= 0 else None,
            optimal * size if optimal >= 0 else None,
            optimal * size / fleet_kv if optimal >= 0 else None)))
    return report


def markdown(report: dict[str, Any]) -> str:
    trace, fleet, ceiling = report["trace"], report["fleet"], report["ceiling"]
    blocks = (f"{trace['distinct_blocks']:,} distinct {trace['block_tokens']}-token blocks"
              if trace["distinct_blocks"] else
              "no prefix blocks (its requests carry neither token ids nor hash ids)")
    lines = [f"Trace `{trace['name']}`: {trace['requests']:,} requests, "
             f"{trace['prompt_tokens']:,} prompt tokens, {blocks}; infinite-cache prefix "
             f"ceiling {ceiling:.1%}. {_fleet_words(fleet)}.", ""]
    if not report["points"]:
        lines.append("No request shares a leading block with an earlier one: a cache of any "
                     "size hits nothing." if ceiling == 0 else "The fleet has no KV capacity.")
        return "\n".join(lines) + "\n"
    lines += ["| cache (× the fleet's KV) | tokens | LRU (vLLM's eviction) | × ceiling "
              "| optimal evictions | × ceiling |", "|--:|--:|--:|--:|--:|--:|"]
    for point in report["points"]:
        bound = (f" (≤ {point['optimal_bound']:.1%})"
                 if point["optimal_bound"] > point["optimal_rate"] else "")
        lines.append(f"| {point['multiple']:g} | {point['capacity_tokens']:,} | "
                     f"{point['lru_rate']:.1%} | {point['lru_rate'] / ceiling:.2f} | "
                     f"{point['optimal_rate']:.1%}{bound} | "
                     f"{point['optimal_rate'] / ceiling:.2f} |")
    lines += ["", "| share of the ceiling | LRU needs (× the fleet's KV) "
              "| optimal evictions need |", "|--:|--:|--:|"]
    for needed in report["needed"]:
        lines.append(f"| {needed['share']:.0%} | "
                     f"{_needed(needed['lru_multiple'], needed['lru_tokens'])} | "
                     f"{_needed(needed['optimal_multiple'], needed['optimal_tokens'])} |")
    lines += ["", "Optimal evictions (Belady's: the block needed again furthest ahead goes "
              "first) are known only offline; no cache of that size, however its space is "
              "split between workers, hits more blocks (a bound shown as ≤ where it differs "
              "from the prefix hits they reach)."]
    return "\n".join(lines) + "\n"


def _fleet_words(fleet: dict[str, Any]) -> str:
    if fleet["name"] is None:
        return f"The fleet's KV: {fleet['kv_tokens']:,} tokens (as given)"
    return (f"Fleet `{fleet['name']}`: KV for {fleet['kv_tokens']:,} tokens (as the simulator "
            "sizes its engines)")


def _needed(multiple: float | None, tokens: int | None) -> str:
    if multiple is None or tokens is None:
        return "never (not even with every block kept)"
    return f"{multiple:.3g} × ({tokens:,} tokens)"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    points = report["plot"]
    if points:
        xs = [p["multiple"] for p in points]
        ax.plot(xs, [100 * p["lru_rate"] for p in points], label="LRU (vLLM's eviction)")
        ax.plot(xs, [100 * p["optimal_rate"] for p in points],
                label="optimal evictions (offline)")
        ax.axhline(100 * report["ceiling"], color="grey", linestyle="--",
                   label="infinite cache")
        ax.axvline(1.0, color="black", linewidth=0.8, label="the fleet's KV")
        ax.set_xscale("log", base=2)
        ticks = [2.0 ** k for k in range(-6, 4)]
        ax.set_xticks(ticks, [f"{t:g}" if t >= 1 else f"1/{round(1 / t)}" for t in ticks])
        ax.minorticks_off()
    ax.set_xlabel("pooled cache size (× the fleet's KV, log scale)")
    ax.set_ylabel("prefix hits (% of prompt tokens)")
    ax.set_title(f"Prefix hits against cache size: {report['trace']['name']}")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:     # none when nothing is reused
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
