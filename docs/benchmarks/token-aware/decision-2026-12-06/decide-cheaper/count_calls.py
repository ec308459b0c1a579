"""Python bytecodes and Python-level calls per ``PolicyEngine.decide``, by function.

``sys.settrace`` with opcode events over decisions 301..(300 + N) of ``bench.decision``'s loop
(10 workers, ``--complete``): deterministic, whatever the machine's load. Run from a tree's
root:

    PYTHONPATH=. python \
        docs/benchmarks/token-aware/decision-2026-12-06/decide-cheaper/count_calls.py 300
"""

from __future__ import annotations

import argparse
import collections
import sys
from types import FrameType
from typing import Any

import bench.decision as bench
from policies.engine import PolicyEngine
from policies.loader import load_routing


def main() -> None:
    counted = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    ops: collections.Counter[tuple[str, str]] = collections.Counter()
    calls: collections.Counter[tuple[str, str]] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        where = (frame.f_code.co_filename, frame.f_code.co_name)
        if event == "call":
            frame.f_trace_opcodes = True
            calls[where] += 1
        elif event == "opcode":
            ops[where] += 1
        return tracer

    decide = PolicyEngine.decide
    seen = [0]

    def counting(self: PolicyEngine, request: Any, views: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        if 300 < seen[0] <= 300 + counted:
            sys.settrace(tracer)
            try:
                return decide(self, request, views, **kwargs)
            finally:
                sys.settrace(None)
        return decide(self, request, views, **kwargs)

    PolicyEngine.decide = counting  # type: ignore[method-assign]
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--workers", "10", "--decisions", str(counted + 10), "--warmup",
                              "300", "--complete", "--out", "unused"])
    bench.time_decisions(load_routing(args.routing), 10, args)
    print(f"bytecodes per decision {sum(ops.values()) / counted:.1f}, "
          f"Python calls per decision {sum(calls.values()) / counted:.1f}")
    for (path, name), count in ops.most_common(25):
        print(f"{count / counted:8.1f} bytecodes {calls[(path, name)] / counted:6.2f} calls  "
              f"{path}:{name}")


if __name__ == "__main__":
    main()
