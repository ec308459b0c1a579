"""The compact tables of ``docs/`` rendered from ``kvroute sim`` summaries (never typed by hand).

``summary.md`` holds every column; the docs show the few that a comparison needs. Three
layouts:

* ``rate`` (a run at one rate scale): policy, SLO met, goodput, prefix hit, TTFT p99,
  TPOT p99, $/Mtok busy (and $/Mtok busy at the goodput scale after a goodput search);
* ``goodput`` (a ``--goodput`` run): policy, SLO met at the first scale, goodput, the
  attainment at each probed scale, prefix hit, $/Mtok busy, and $/Mtok busy at the goodput
  scale;
* ``prefix`` (where prefix hits are lost, ``docs/sim.md``): policy, SLO met, the prefix hit
  rate, what the chosen worker and any worker held when each request was routed, the gap
  split by the decisions' deciding term, and per GPU class its share of the prompt tokens
  and the hit rate of its workers.

``--against EARLIER/summary.json`` renders instead what changed from an earlier run of the
same policies (another engine model, another commit): per policy, each side's recompute
preemptions, SLO met, goodput and $/Mtok busy at goodput (or at the run's scale), after a
sentence naming how the two runs' workloads differ, when they do.

    python -m sim.doc_tables out/ta2/azure1500/summary.json --layout goodput
    python -m sim.doc_tables new/summary.json --against old/summary.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _num(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _goodput(entry: Mapping[str, Any]) -> str:
    shown = _num(entry.get("goodput_rate_scale"), 2)
    return f"≥ {shown}" if entry.get("goodput_capped") else shown    # the search's last scale


def _probes(entry: Mapping[str, Any]) -> str:
    """Every probe of the search, highest scale first."""
    probes = sorted(entry.get("goodput_probes") or (), key=lambda p: -p[0])
    return ", ".join(f"×{scale:g} {value:.1%}" for scale, value in probes)


def _passed_over(entry: Mapping[str, Any], shown: int = 3) -> str:
    """The deciding terms of the decisions that passed a cached prefix over, largest first."""
    terms = entry.get("prefix_passed_over_by_term")
    if terms is None:
        return "–"
    items = list(terms.items())
    text = ", ".join(f"{term or '?'} {_share(share)}" for term, share in items[:shown])
    rest = sum(share for _, share in items[shown:])
    return (text + (f", others {_share(rest)}" if rest else "")) or "none"


def _share(value: float) -> str:
    """A percentage with one decimal; a share too small to show one is ``<0.1%``."""
    return f"{value:.1%}" if value >= 0.0005 else "<0.1%"


def _by_gpu_class(entry: Mapping[str, Any], gpu_of: Mapping[str, str]) -> str:
    """Each GPU class's share of the prompt tokens, and the hit rate of its workers."""
    prompt: dict[str, int] = {}
    cached: dict[str, int] = {}
    cached_of = entry.get("cached_tokens_per_worker") or {}
    for worker, tokens in (entry.get("prompt_tokens_per_worker") or {}).items():
        gpu = gpu_of.get(worker, worker)
        prompt[gpu] = prompt.get(gpu, 0) + tokens
        cached[gpu] = cached.get(gpu, 0) + cached_of.get(worker, 0)
    total = sum(prompt.values())
    if not total:
        return "–"
    return ", ".join(f"{gpu} {tokens / total:.0%} ({cached[gpu] / tokens:.1%})"
                     for gpu, tokens in sorted(prompt.items(), key=lambda kv: -kv[1]))


def header_line(summary: Mapping[str, Any]) -> str:
    """The trace, slice, rate and ceilings the table was measured on."""
    trace = summary.get("trace", {})
    pooled = trace.get("prefix_hit_ceiling_pooled")
    line = (f"{trace.get('requests')} requests at rate scale {trace.get('rate_scale')}; "
            f"infinite-cache prefix ceiling {_pct(trace.get('prefix_hit_ceiling'))}")
    if pooled is not None:
        line += f", one LRU cache of the whole fleet's KV {_pct(pooled)}"
    return line + "."


def table(summary: Mapping[str, Any], layout: str) -> str:
    policies: Mapping[str, Mapping[str, Any]] = summary.get("policies", {})
    if layout == "rate":
        head = ["policy", "SLO met", "goodput ×rate", "prefix hit", "TTFT p99 s",
                "TPOT p99 ms", "$/Mtok busy"]
        rows = [[name, _pct(e.get("slo_attainment")), _goodput(e),
                 _pct(e.get("prefix_hit_rate")), _num(e.get("ttft_p99"), 2),
                 _num(None if e.get("tpot_p99") is None else e["tpot_p99"] * 1000, 0),
                 _num(e.get("cost_per_mtok_busy"), 3)] for name, e in policies.items()]
        if any("goodput_cost_per_mtok_busy" in e for e in policies.values()):
            head.append("$/Mtok busy at goodput")
            for row, entry in zip(rows, policies.values(), strict=True):
                row.append(_num(entry.get("goodput_cost_per_mtok_busy"), 3))
    elif layout == "goodput":
        head = ["policy", "SLO met at ×1.0", "goodput ×rate",
                "SLO attainment at each probed scale", "prefix hit", "$/Mtok busy",
                "$/Mtok busy at goodput"]
        rows = [[name, _pct(e.get("slo_attainment")), _goodput(e), _probes(e),
                 _pct(e.get("prefix_hit_rate")), _num(e.get("cost_per_mtok_busy"), 3),
                 _num(e.get("goodput_cost_per_mtok_busy"), 3)]
                for name, e in policies.items()]
    elif layout == "prefix":
        gpu_of = {w["id"]: w["gpu"] for w in summary.get("fleet", {}).get("workers", ())}
        head = ["policy", "SLO met", "prefix hit", "cached on the chosen worker",
                "cached anywhere", "passed over, by deciding term",
                "prompt tokens (hit rate) by GPU class"]
        rows = [[name, _pct(e.get("slo_attainment")), _pct(e.get("prefix_hit_rate")),
                 _pct(e.get("prefix_cached_chosen")), _pct(e.get("prefix_cached_anywhere")),
                 _passed_over(e), _by_gpu_class(e, gpu_of)] for name, e in policies.items()]
    else:
        raise ValueError(f"unknown layout {layout!r} (rate, goodput or prefix)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _change(before: str, after: str) -> str:
    return before if before == after else f"{before} → {after}"


def changes(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> str:
    """The policies of both runs, each figure as ``earlier → later`` (one value when equal)."""
    old: Mapping[str, Mapping[str, Any]] = earlier.get("policies", {})
    new: Mapping[str, Mapping[str, Any]] = later.get("policies", {})

    def cost(entry: Mapping[str, Any]) -> str:
        at_goodput = entry.get("goodput_cost_per_mtok_busy")
        return _num(at_goodput if at_goodput is not None
                    else entry.get("cost_per_mtok_busy"), 3)

    head = ["policy", "preemptions", "SLO met", "goodput ×rate", "$/Mtok busy (at goodput)"]
    rows = [[name, _change(str(old[name].get("preemptions", "–")),
                           str(new[name].get("preemptions", "–"))),
             _change(_pct(old[name].get("slo_attainment")), _pct(e.get("slo_attainment"))),
             _change(_goodput(old[name]), _goodput(e)), _change(cost(old[name]), cost(e))]
            for name, e in new.items() if name in old]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# what makes two runs' workload the same: a comparison across any of these compares apples
# with pears, and says so
WORKLOAD_FIELDS = ("name", "requests", "skip", "limit", "duration_s", "jitter_s", "rate_scale",
                   "seed", "prompt_tokens", "output_tokens")


def workload_differences(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> str | None:
    """A sentence naming how the two runs' traces differ, None when they do not."""
    old, new = earlier.get("trace", {}), later.get("trace", {})
    differing = [f"{field} {old.get(field)} → {new.get(field)}" for field in WORKLOAD_FIELDS
                 if old.get(field) != new.get(field)]
    if not differing:
        return None
    return ("The two runs are not of the same workload (" + ", ".join(differing)
            + "): the changes below are not the code's alone.")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.doc_tables", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("summary", type=Path, help="a summary.json written by kvroute sim")
    parser.add_argument("--layout", choices=("rate", "goodput", "prefix"), default="rate")
    parser.add_argument("--against", type=Path, metavar="EARLIER",
                        help="an earlier run's summary.json: show what changed from it")
    args = parser.parse_args(argv)
    try:
        summary = json.loads(args.summary.read_text())
        earlier = json.loads(args.against.read_text()) if args.against else None
    except (OSError, ValueError) as exc:
        print(f"sim.doc_tables: {exc}", file=sys.stderr)
        return 2
    print(header_line(summary))
    print()
    different = None if earlier is None else workload_differences(earlier, summary)
    if different is not None:
        print(different)
        print()
    print(table(summary, args.layout) if earlier is None else changes(earlier, summary), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
