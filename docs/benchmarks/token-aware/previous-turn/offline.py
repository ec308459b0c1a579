"""How well a conversation's previous turn predicts its next answer's length, on a Mooncake
trace, without the simulator: every request in arrival order is looked up in
``PreviousTurns`` (the output-length producer's memory of finished prompts) and then
remembered with its own answer, as if each finished before the next arrived.

Each 512-token Mooncake block id is cut into the 16-token blocks a vLLM worker hashes, each
named by its whole prefix (as the simulator's synthetic tokens make them), so a continuation
shares the previous prompt up to the last whole 512-token block they have in common.

Compared: the previous turn's answer length, and the running geometric mean of every answer
before it (what the producer predicts without the turn, for a client that sends no
``max_tokens``). Error: |ln(generated / predicted)|.

    python docs/benchmarks/token-aware/previous-turn/offline.py \
        --trace ../shared/traces/mooncake_conversation_trace.jsonl.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
from pathlib import Path

from policies.producers.previous_turns import PreviousTurns

MOONCAKE_BLOCK = 512
VLLM_BLOCK = 16


def chain(hash_ids: list[int], prompt_tokens: int) -> list[int]:
    """The prompt's 16-token block hashes: each names the 512-token ids before it and its
    place in its own 512-token block."""
    blocks: list[int] = []
    prefix: tuple[int, ...] = ()
    for k, block_id in enumerate(hash_ids):
        prefix += (block_id,)
        tokens = min(MOONCAKE_BLOCK, prompt_tokens - MOONCAKE_BLOCK * k)
        blocks.extend(hash((prefix, j)) for j in range(tokens // VLLM_BLOCK))
    return blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, required=True)
    args = parser.parse_args()
    with gzip.open(args.trace, "rt") as fh:
        rows = [json.loads(line) for line in fh]
    turns = PreviousTurns()
    log_sum = 0.0
    turn_errors: list[float] = []
    mean_errors: list[float] = []
    for seen, row in enumerate(rows):
        blocks = chain(row["hash_ids"], row["input_length"])
        generated = max(1, row["output_length"])
        answer = turns.answer_before(blocks)
        if answer is not None and seen:
            turn_errors.append(abs(math.log(generated / answer)))
            mean_errors.append(abs(math.log(generated) - log_sum / seen))
        turns.remember(blocks, generated)
        log_sum += math.log(generated)
    within = math.log(2.0)
    print(f"{len(rows)} requests; {len(turn_errors)} continue an earlier one "
          f"({len(turn_errors) / len(rows):.0%})")
    print("| prediction for those | mean abs ln error | within 2 x |")
    print("|---|--:|--:|")
    for name, errors in (("the previous turn's answer", turn_errors),
                         ("geometric mean of the answers before", mean_errors)):
        share = sum(e < within for e in errors) / len(errors)
        print(f"| {name} | {statistics.fmean(errors):.3f} | {share:.0%} |")


if __name__ == "__main__":
    main()
