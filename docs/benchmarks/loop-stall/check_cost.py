"""CPU time of ``router.body_values.check_body_values`` on the bodies that cost it most: one
of unclosed quotes, a 32 MiB string of escaped backslashes and commas (walked, then
accepted) and 32 MiB of empty objects (refused).

    python docs/benchmarks/loop-stall/check_cost.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from router.body_values import check_body_values
from router.errors import RequestTooLarge

CASES = {
    "2,000 unclosed quotes, then 2,100,000 commas (2.1 MB)":
        b'"' + b'\\"' * 2000 + b"," * 2_100_000,
    "one string of escaped backslashes and commas (32 MiB)":
        b'{"prompt":"' + b"\\\\," * ((32 << 20) // 3 - 10) + b'"}',
    "empty objects (32 MiB)": b"[" + b"{}," * ((32 << 20) // 3 - 1) + b"{}]",
}

for name, body in CASES.items():
    started = time.process_time()
    try:
        check_body_values(body)
        outcome = "accepted"
    except RequestTooLarge:
        outcome = "413"
    print(f"{name}: {outcome}, {(time.process_time() - started) * 1e3:.0f} ms of CPU")
