"""Print the Markdown table of ``bench.loop_stall`` from a ``loop_stall.json`` it wrote.

    python docs/benchmarks/loop-stall/table.py docs/benchmarks/loop-stall/at-c426211/loop_stall.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.loop_stall import CaseResult, markdown

report = json.loads(Path(sys.argv[1]).read_text())
print(markdown([CaseResult(**case) for case in report["cases"]]))
