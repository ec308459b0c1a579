"""The answer lengths of the turns a conversation's next prompt continues, found by block hash.

A chat client resends the whole conversation every turn, so turn n + 1's prompt begins with
turn n's prompt, followed by turn n's answer and the new message. How long turn n's answer
was says much more about turn n + 1's than what the tenant's requests generate on average
(on the Mooncake conversation trace, a request that continues an earlier one generates
within 2 × of that one's answer three times in four, against two in five for the trace's
geometric mean). The chained block hashes of the ``blocks`` producer identify the
continuation: a hash names its whole prefix, so a new prompt holding an earlier prompt's
last block holds that whole prompt.

``PreviousTurns`` remembers, for each finished request, a few block hashes of its prompt
(those at positions ``p`` with ``p % stride == stride - 1`` among its last ``reach + 1``
blocks), each mapped to the length of its answer, in an LRU of at most ``capacity`` hashes.
A new prompt is looked up at the same positions among its last ``lookback`` blocks, deepest
first: the deepest remembered hash is the turn it continues. A turn's prompt is an exact
prefix of the next one's, so the next turn holds every position the turn kept; keeping
every ``stride``-th makes a lookup ``stride`` times cheaper, and the lookup first asks
whether any of them is known at all in one C-level call, which for most prompts (a new
conversation) is the answer. Prompts shorter than ``stride`` blocks are not remembered.
Positions before the last are kept for a trace that names whole 512-token blocks (Mooncake):
there the block that held the end of turn n's prompt has a new id in turn n + 1 (it now
holds the answer too), so the prefix they share ends up to 31 blocks of 16 tokens before
turn n's last block.

A later turn of the same conversation keeps some of the positions its previous turn kept
(those within ``reach`` of both ends) and takes them over: it holds the previous prompt's
deepest kept block, so it continues it. A prompt that shares a kept block without holding
that one (another conversation after the same long system prompt, when the first asked
less than ``reach`` blocks) makes the block ambiguous: it predicts nothing from then on, and
a lookup that meets it stops there.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

# an entry's value: (answer tokens, or AMBIGUOUS; the deepest kept position of the prompt that
# answered, and its hash there)
Entry = tuple[int, int, int]
AMBIGUOUS = -1     # an entry's answer once two different prompts were remembered there


class PreviousTurns:
    """Block hash -> the answer length of the finished prompt it belongs to (see the module
    docstring)."""

    __slots__ = ("_answers", "capacity", "lookback", "reach", "stride")

    def __init__(self, capacity: int = 200_000, stride: int = 8, reach: int = 32,
                 lookback: int = 512) -> None:
        self.capacity = capacity
        self.stride = stride
        self.reach = reach
        self.lookback = lookback
        self._answers: OrderedDict[int, Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._answers)

    def remember(self, chain: Sequence[int], completion_tokens: int) -> None:
        """A request whose prompt had block hashes ``chain`` generated ``completion_tokens``."""
        if self.capacity == 0 or completion_tokens < 1:
            return
        answers, stride = self._answers, self.stride
        last = len(chain) - 1
        deepest = last - (last + 1) % stride      # the last position p with p % stride == -1
        if deepest < 0:
            return
        mine = (completion_tokens, deepest, chain[deepest])
        for position in range(deepest, max(-1, last - self.reach - 1), -stride):
            key = chain[position]
            known = answers.get(key)
            if known is None:
                answers[key] = mine
                continue
            _, at, there = known
            # a later turn (or another answer) of the same prompt holds its deepest kept
            # block too, and takes its place; any other prompt makes the block ambiguous
            answers[key] = mine if at <= last and chain[at] == there else (AMBIGUOUS, at, there)
            answers.move_to_end(key)
        while len(answers) > self.capacity:
            answers.popitem(last=False)

    def answer_before(self, chain: Sequence[int]) -> int | None:
        """The answer length of the turn ``chain`` continues: the deepest remembered hash
        among its last ``lookback`` blocks, or None (none, or an ambiguous one)."""
        answers, stride = self._answers, self.stride
        last = len(chain) - 1
        deepest = last - (last + 1) % stride
        lowest = max(0, last - self.lookback + 1)
        lowest += (stride - 1 - lowest % stride) % stride
        if deepest < lowest:
            return None
        kept = chain[lowest:deepest + 1:stride]       # the positions remember keeps
        if answers.keys().isdisjoint(kept):       # in C: most prompts continue no turn
            return None
        for key in reversed(kept):
            known = answers.get(key)
            if known is not None:
                if known[0] == AMBIGUOUS:
                    return None
                answers.move_to_end(key)
                return known[0]
        return None
