"""Writes ``config/fleets/bench-mixed.yaml`` with every worker's KV cache ``M`` times as large,
as the simulator sizes its engines: each GPU class's memory is raised until the KV that is
left after the weights is ``M`` times the original (the KV grows linearly with the memory).
Compute and bandwidth stay those of the GPU: the fleet serves as fast, with more cache, as a
CPU offload tier behind vLLM's prefix cache would give it (without the offload's load time).

    python docs/benchmarks/prefix-losses/cache-curve/scaled_kv_fleet.py 2 /tmp/bench-mixed-kv2.yaml
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml

from sim.simulator import fleet_kv_tokens
from workers.fleet import BUILTIN_GPUS, parse_fleet

BENCH_MIXED = Path(__file__).resolve().parents[4] / "config" / "fleets" / "bench-mixed.yaml"


def _one_worker_kv(base: dict[str, Any], gpu: str, memory_gb: float) -> int:
    fleet = copy.deepcopy(base)
    fleet["gpu_classes"][gpu] = {**fleet["gpu_classes"].get(gpu, {}),
                                 "memory_gb": memory_gb, "visible_memory_gb": memory_gb}
    fleet["workers"] = [w for w in fleet["workers"] if w["gpu"] == gpu][:1]
    return fleet_kv_tokens(parse_fleet(fleet))


def scaled(multiple: float) -> dict[str, Any]:
    base = yaml.safe_load(BENCH_MIXED.read_text())
    fleet = copy.deepcopy(base)
    for gpu in sorted({w["gpu"] for w in base["workers"]}):
        profile = BUILTIN_GPUS[gpu]
        memory = profile.visible_memory_gb or profile.memory_gb
        kv, kv_more = _one_worker_kv(base, gpu, memory), _one_worker_kv(base, gpu, memory + 10)
        wanted = memory + (multiple - 1) * kv * 10 / (kv_more - kv)
        fleet["gpu_classes"][gpu] = {**base["gpu_classes"].get(gpu, {}),
                                     "memory_gb": round(wanted, 3),
                                     "visible_memory_gb": round(wanted, 3)}
    return fleet


def main() -> None:
    multiple, out = float(sys.argv[1]), Path(sys.argv[2])
    fleet = scaled(multiple)
    out.write_text(yaml.safe_dump(fleet, sort_keys=False))
    before = fleet_kv_tokens(parse_fleet(yaml.safe_load(BENCH_MIXED.read_text())))
    after = fleet_kv_tokens(parse_fleet(fleet))
    print(f"wrote {out}: KV for {after:,} tokens, {after / before:.3f} x bench-mixed's {before:,}")


if __name__ == "__main__":
    main()
