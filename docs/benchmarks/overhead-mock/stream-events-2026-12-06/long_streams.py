"""``kvroute bench overhead --backend mock`` with answers of ``TOKENS`` tokens (the CLI fixes
16): ``kvroute-rr`` and ``kvroute``, 8 s per phase. Run from the tree to measure, with it on
``PYTHONPATH``:

    PYTHONPATH=. python \
        docs/benchmarks/overhead-mock/stream-events-2026-12-06/long_streams.py 512 OUT
"""

import sys
from pathlib import Path

from bench.overhead import OverheadConfig, run_overhead
from bench.overhead_report import markdown_table, write_overhead

tokens, out = int(sys.argv[1]), Path(sys.argv[2])
config = OverheadConfig(targets=("kvroute-rr", "kvroute"), duration_s=8.0, backend="mock",
                        output_tokens=tokens)
command = ("run_overhead(OverheadConfig(targets=('kvroute-rr','kvroute'), duration_s=8, "
           f"backend='mock', output_tokens={tokens}))")
results = run_overhead(config, lambda line: print(line, flush=True))
write_overhead(out, config, results, command)
print(markdown_table(results))
