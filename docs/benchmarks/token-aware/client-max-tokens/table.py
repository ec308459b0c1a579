"""The tables of docs/benchmarks.md, "When clients do not send the answer's length", printed
from the summaries in this folder:

    python docs/benchmarks/token-aware/client-max-tokens/table.py

Each run folder holds a ``kvroute sim`` ``summary.json``; ``learn`` is ``config/routing.yaml``
(with the ``output-length`` producer), ``nolearn`` the same with ``min_samples: 1000000000``
(it never predicts: the router takes ``max_tokens``, or 256, as before the producer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def policies(run: str) -> dict[str, Any]:
    return dict(json.loads((HERE / run / "summary.json").read_text())["policies"])


def goodput(run: str, policy: str) -> float:
    return float(policies(run)[policy]["goodput_rate_scale"])


def cost(run: str, policy: str) -> float:
    value = policies(run)[policy]["goodput_cost_per_mtok_busy"]
    return float(value) if isinstance(value, float | int) else float("nan")


def best_peer(run: str) -> str:
    entries = policies(run)
    return max(entries, key=lambda name: float(entries[name]["goodput_rate_scale"]))


def dev_table() -> None:
    print("| slice | clients send | before (no prediction) | arithmetic mean (tried) "
          "| geometric mean (`output-length`) | sglang-cache-aware "
          "| $/Mtok busy at goodput, `output-length` vs sglang-cache-aware |")
    print("|---|---|---|---|---|---|---|")
    for trace, label in (("az", "Azure code, first 1,500"),
                         ("mc", "Mooncake, first 1,000, `--jitter 3`")):
        for mode in ("exact", "none", "4096"):
            before, final = f"dev/before/{trace}-{mode}", f"dev/final/{trace}-{mode}"
            arithmetic = (f"{goodput(f'dev/arith-mean/{trace}-{mode}', 'kvroute'):.2f}"
                          if mode != "exact" else "(same as before)")
            ours, theirs = cost(final, "kvroute"), cost(before, "sglang-cache-aware")
            print(f"| {label} | {mode} | {goodput(before, 'kvroute'):.2f} | {arithmetic} "
                  f"| {goodput(final, 'kvroute'):.2f} "
                  f"| {goodput(before, 'sglang-cache-aware'):.2f} "
                  f"| {ours:.3f} vs {theirs:.3f} = {ours / theirs:.2f} × |")


def held_table() -> None:
    print("| slice | clients send | before (`nolearn`) | `output-length` (`learn`) | best peer "
          "| × best peer, before → after | $/Mtok busy at goodput, after vs best peer |")
    print("|---|---|---|---|---|---|---|")
    for trace, label in (("az4001", "Azure rows 4001–5500"), ("az6001", "Azure rows 6001–7500"),
                         ("mc6001", "Mooncake rows 6001–7000, `--jitter 3`"),
                         ("mc9001", "Mooncake rows 9001–10000, `--jitter 3`")):
        peers = f"held/{trace}-peers"
        peer = best_peer(peers)
        peer_goodput, peer_cost = goodput(peers, peer), cost(peers, peer)
        for mode in ("none", "4096"):
            run = f"held/{trace}-{mode}"
            before, after, ours = goodput(run, "nolearn"), goodput(run, "learn"), cost(run, "learn")
            print(f"| {label} | {mode} | {before:.2f} | {after:.2f} | {peer} {peer_goodput:.2f} "
                  f"| {before / peer_goodput:.2f} → {after / peer_goodput:.2f} "
                  f"| {ours:.3f} vs {peer_cost:.3f} = {ours / peer_cost:.2f} × |")


def servegen_table() -> None:
    print("| span | before (`nolearn`) | `output-length` (`learn`) | llm-d-default "
          "| $/Mtok busy at goodput: before, after, llm-d-default |")
    print("|---|---|---|---|---|")
    spans = sorted((HERE / "servegen").glob("span-*-none"),
                   key=lambda path: int(path.name.split("-")[1]))
    for path in spans:
        start, run = int(path.name.split("-")[1]), f"servegen/{path.name}"
        costs = ", ".join(f"{cost(run, p):.3f}" for p in ("nolearn", "learn", "llm-d-default"))
        print(f"| {start:,} s | {goodput(run, 'nolearn'):.2f} | {goodput(run, 'learn'):.2f} "
              f"| {goodput(run, 'llm-d-default'):.2f} | {costs} |")


if __name__ == "__main__":
    dev_table()
    print()
    held_table()
    print()
    servegen_table()
