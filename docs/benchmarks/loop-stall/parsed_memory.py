"""What a body of about 2,000,000 JSON values (``--max-body-values``, the most the router
parses) costs parsed, by the kind of its items: each kind in a fresh process, the growth of
its peak resident memory (``ru_maxrss``) over ``router.protocol.parse_body``.

    cd docs/benchmarks/loop-stall && python parsed_memory.py > parsed_memory.txt
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# an item, and how many of them make the values counted just under 2,000,000 (a container
# counts its opening bracket and its comma)
KINDS = [('{"a":1}', 999_990), ('{"ab":"cd"}', 999_990), ("[1]", 999_990), ("[]", 999_990),
         ("1.5", 1_999_990), ("1000", 1_999_990), ('"abcdefghij"', 1_999_990)]


def one(item: str, count: int) -> str:
    sys.path.insert(0, str(ROOT))
    from router.protocol import parse_body

    body = (b'{"model":"m","prompt":"hi","x":[' + (item.encode() + b",") * count
            + item.encode() + b"]}")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    parse_body(body)          # raises (413) past the limit
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    return f"| `{item}` | {count + 1:,} | {len(body) / 2**20:.1f} MiB | {grown:.0f} MiB |"


if __name__ == "__main__":
    if len(sys.argv) == 3:
        print(one(sys.argv[1], int(sys.argv[2])))
    else:
        print("| item | items | body | peak memory growth parsed |")
        print("|---|--:|--:|--:|")
        for kind, many in KINDS:
            print(subprocess.run([sys.executable, __file__, kind, str(many)], check=True,
                                 capture_output=True, text=True).stdout.strip())
