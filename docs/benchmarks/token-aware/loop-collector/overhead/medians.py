"""Per target, the median and range over the runs in this folder (``run*/overhead.json``) of
the router's CPU per request, non-streamed and streamed. Run from the repository root::

    python docs/benchmarks/token-aware/loop-collector/overhead/medians.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    per_target: dict[str, dict[str, list[float]]] = {}
    for path in sorted(HERE.glob("run*/overhead.json")):
        for result in json.loads(path.read_text())["results"]:
            phases = per_target.setdefault(result["name"], {"non_stream": [], "stream": []})
            for phase, values in phases.items():
                values.append(result[phase]["router_cpu_us_per_request"])
    for name, phases in per_target.items():
        cells = [f"{phase} median {statistics.median(v):.0f} (range {min(v):.0f}-{max(v):.0f}, "
                 f"spread {100 * (max(v) - min(v)) / min(v):.0f} %, {len(v)} runs)"
                 for phase, v in phases.items()]
        print(f"{name}: router CPU µs per request: " + "; ".join(cells))


if __name__ == "__main__":
    main()
