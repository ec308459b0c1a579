"""What ``PreviousTurns`` costs: lookup and remember times (``timeit``) and memory per kept
block hash (``tracemalloc``), with its defaults, 200,000 hashes kept.

    python docs/benchmarks/token-aware/previous-turn/cost.py
"""

from __future__ import annotations

import random
import timeit
import tracemalloc
from array import array

from policies.producers.previous_turns import PreviousTurns


def hashes(rng: random.Random, count: int) -> array[int]:
    return array("Q", [rng.getrandbits(64) for _ in range(count)])


def main() -> None:
    rng = random.Random(0)
    tracemalloc.start()
    turns = PreviousTurns()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(60_000):                    # 40-block prompts: 5 hashes each
        turns.remember(hashes(rng, 40), rng.randint(1, 3000))
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(f"{len(turns):,} hashes kept: {(after - before) / len(turns):.0f} bytes each")
    new = hashes(rng, 600)
    earlier = hashes(rng, 40)
    turns.remember(earlier, 5)
    near = array("Q", [*earlier, *range(1, 11)])       # 10 blocks of answer and message
    far = array("Q", [*earlier, *range(1, 400)])       # 399
    runs = 5000
    for label, call in (("lookup, a 600-block prompt continuing nothing",
                         lambda: turns.answer_before(new)),
                        ("lookup, a prompt 10 blocks past its previous turn",
                         lambda: turns.answer_before(near)),
                        ("lookup, a prompt 399 blocks past its previous turn",
                         lambda: turns.answer_before(far)),
                        ("remember a 600-block prompt", lambda: turns.remember(new, 5))):
        best = min(timeit.repeat(call, number=runs, repeat=3)) / runs
        print(f"{label}: {best * 1e6:.1f} µs")


if __name__ == "__main__":
    main()
