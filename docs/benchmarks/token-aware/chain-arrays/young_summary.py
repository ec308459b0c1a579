"""The median thread CPU of the young collections in a ``young_listing.py`` log, over the
whole run and after its first third (the collections that listed the generation are left
out: the listing itself is not timed, but it runs just before them)::

    python docs/benchmarks/token-aware/chain-arrays/young_summary.py \
        docs/benchmarks/token-aware/chain-arrays/young_listing-router.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main() -> None:
    rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line]
    young = [row["cpu_us"] for row in rows if row.get("gen") == 0 and not row["inspected"]]
    later = [row["cpu_us"] for row in rows[len(rows) // 3:]
             if row.get("gen") == 0 and not row["inspected"]]
    print(f"{len(young)} young collections: median {statistics.median(young):.0f} µs CPU; "
          f"after the first third ({len(later)}): {statistics.median(later):.0f} µs")


if __name__ == "__main__":
    main()
