"""Prefix hit rate against cache size: LRU eviction and the offline optimum.

The simulator reads a trace's prefix reuse against two yardsticks, both ``prefix_ceiling``
here: the infinite-cache ceiling (every block seen before is a hit) and one LRU cache the
size of the whole fleet's KV. This module also draws the curve between them: the hit rate a
pooled cache of any size reaches

* with **LRU** eviction, as vLLM evicts (the least recently used free block first), and
* with the **optimal** evictions, known only offline (Belady's rule: when a block must go,
  drop the one needed again furthest in the future, or keep out a block that is needed no
  sooner than any held one). Counted over every block, it is a bound no eviction of a
  cache that size beats, however its space is split between workers (``upper``; the curve
  takes the lower of it and the ceiling); counted as prefix hits (a request's leading blocks
  up to its first miss, what an engine reuses), it is what those evictions reach
  (``reached``).

Both count as the pooled ceiling does: each request's full blocks (Mooncake's 512-token hash
ids, other traces' 16-token blocks) in arrival order, a request's hits judged before its own
blocks enter the cache, rates over every prompt token of the trace. The infinite-cache
ceiling ``prefix_ceiling`` reports also counts, for Mooncake rows, the 16-token blocks of a
prompt's last, partial 512-token block that an earlier prompt with the same hash ids held
(an engine reuses those; counted in whole blocks, a trace of repeated prompts ending
mid-block read hit rates above the ceiling; on the Mooncake conversation trace the two
counts differ by 0.0002). ``capacity_for`` finds by
bisection the smallest cache whose hits reach a share of the ceiling (both hit counts only
grow with the cache: LRU and Belady's rule keep what a smaller cache would keep).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from sim.synthetic_tokens import MOONCAKE_BLOCK_TOKENS
from sim.traces import Trace, block_keys

TOKEN_BLOCK_TOKENS = 16   # the block of traces that carry tokens, as ``prefix_ceiling`` counts


@dataclass(frozen=True, slots=True)
class BlockAccesses:
    """A trace's prefix blocks, request after request, as the ceilings count them."""

    keys: Sequence[Hashable]       # every request's full blocks, in arrival order
    starts: Sequence[int]          # where each request's blocks begin in ``keys``; one more
    block_tokens: int
    prompt_tokens: int             # every request's prompt tokens: the rates' denominator

    @property
    def distinct_blocks(self) -> int:
        return len(set(self.keys))


def block_accesses(trace: Trace) -> BlockAccesses:
    """The trace's blocks (requests without token or hash ids share none and add no block)."""
    keys: list[Hashable] = []
    starts = [0]
    sizes: set[int] = set()
    prompt_tokens = 0
    for request in trace.requests:
        prompt_tokens += request.num_prompt_tokens
        if request.hash_ids is not None:
            sizes.add(MOONCAKE_BLOCK_TOKENS)
        elif request.token_ids is not None:
            sizes.add(TOKEN_BLOCK_TOKENS)
        else:
            continue
        keys.extend(block_keys(trace, request, TOKEN_BLOCK_TOKENS))
        starts.append(len(keys))
    if len(sizes) > 1:
        raise ValueError("a trace mixing Mooncake hash ids and token ids has two block sizes")
    size = sizes.pop() if sizes else MOONCAKE_BLOCK_TOKENS
    return BlockAccesses(keys, starts, size, prompt_tokens)


def prefix_ceiling(trace: Trace, capacity_tokens: int | None = None) -> float:
    """Prompt-token hit rate with an infinite prefix cache, at block granularity.

    A request's cached tokens are its leading full blocks already seen in earlier requests
    (16-token blocks; for Mooncake rows, those of the 512-token hash-id blocks an earlier row
    held, see ``_hash_id_ceiling``).
    ``capacity_tokens``: instead, one LRU cache of that many tokens shared by every request
    (each block held once, evicted least recently used first, as vLLM evicts): with the
    whole fleet's KV capacity, what a router could reach if the fleet were one engine.
    """
    if capacity_tokens is None and any(r.hash_ids is not None for r in trace.requests):
        return _hash_id_ceiling(trace)
    accesses = block_accesses(trace)
    blocks = (len(accesses.keys) if capacity_tokens is None
              else capacity_tokens // accesses.block_tokens)
    return rate(accesses, lru_hits(accesses, blocks))


def _hash_id_ceiling(trace: Trace) -> float:
    """The infinite-cache ceiling of a Mooncake trace in 16-token blocks: a hash id stands for
    its block's prefix (as ``block_accesses`` keys it), so each id remembers how many of its
    block's tokens some request held, and a later request reuses as many whole 16-token blocks
    of them as it has, up to its first block not held whole."""
    covered: dict[int, int] = {}          # hash id -> most tokens of its block seen
    hit_tokens = prompt_tokens = 0
    for request in trace.requests:
        length = request.num_prompt_tokens
        prompt_tokens += length
        if request.hash_ids is None:
            continue
        reusing = True
        for i, hash_id in enumerate(request.hash_ids):
            tokens = min(MOONCAKE_BLOCK_TOKENS, length - i * MOONCAKE_BLOCK_TOKENS)
            if tokens <= 0:
                break
            if reusing:
                held = min(covered.get(hash_id, 0), tokens) // TOKEN_BLOCK_TOKENS
                hit_tokens += held * TOKEN_BLOCK_TOKENS
                reusing = held * TOKEN_BLOCK_TOKENS == tokens
            if covered.get(hash_id, 0) < tokens:
                covered[hash_id] = tokens
    return hit_tokens / prompt_tokens if prompt_tokens else 0.0


def infinite_hits(accesses: BlockAccesses) -> int:
    """Prefix-hit blocks with a cache that keeps everything (the ceiling's count)."""
    return lru_hits(accesses, len(accesses.keys))


def lru_hits(accesses: BlockAccesses, capacity_blocks: int) -> int:
    """Prefix-hit blocks of one LRU cache of ``capacity_blocks`` blocks."""
    held: OrderedDict[Hashable, None] = OrderedDict()
    keys, starts = accesses.keys, accesses.starts
    hits = 0
    for begin, end in pairwise(starts):
        position = begin
        while position < end and keys[position] in held:
            position += 1
        hits += position - begin
        for index in range(begin, end):      # most recently used last
            key = keys[index]
            held[key] = None
            held.move_to_end(key)
        while len(held) > capacity_blocks:
            held.popitem(last=False)
    return hits


@dataclass(frozen=True, slots=True)
class OptimalHits:
    reached: int     # prefix-hit blocks under Belady's evictions
    upper: int       # every block hit under them: no eviction of this cache size hits more


def optimal_hits(accesses: BlockAccesses, capacity_blocks: int) -> OptimalHits:
    """Hits of a cache of ``capacity_blocks`` blocks evicting by Belady's rule."""
    keys, starts = accesses.keys, accesses.starts
    never = len(keys)
    next_use = [never] * len(keys)
    later: dict[Hashable, int] = {}
    for index in range(len(keys) - 1, -1, -1):
        next_use[index] = later.get(keys[index], never)
        later[keys[index]] = index
    held: dict[Hashable, int] = {}              # block -> the index of its next use
    furthest: list[tuple[int, int, Hashable]] = []   # (-next use, index, block), stale kept
    upper = reached = 0
    for begin, end in pairwise(starts):
        leading = True
        for index in range(begin, end):
            key, needed = keys[index], next_use[index]
            if key in held:
                upper += 1
                reached += leading
                held[key] = needed
                heapq.heappush(furthest, (-needed, index, key))
                continue
            leading = False
            if needed == never or capacity_blocks <= 0:
                continue                    # never needed again: kept out
            if len(held) >= capacity_blocks:
                while held.get(furthest[0][2]) != -furthest[0][0]:
                    heapq.heappop(furthest)     # an entry its block's later use replaced
                if -furthest[0][0] < needed:
                    continue                # every held block is needed sooner: kept out
                del held[heapq.heappop(furthest)[2]]
            held[key] = needed
            heapq.heappush(furthest, (-needed, index, key))
    return OptimalHits(reached, upper)


def capacity_for(hits_at: Callable[[int], int], hits_wanted: int, most_blocks: int) -> int:
    """The smallest capacity in blocks, up to ``most_blocks``, whose ``hits_at`` reaches
    ``hits_wanted`` (bisection: ``hits_at`` must not fall as the capacity grows); -1 when
    even ``most_blocks`` does not."""
    if hits_at(most_blocks) < hits_wanted:
        return -1
    low, high = 0, most_blocks          # hits_at(high) reaches it; below low it does not
    while low < high:
        middle = (low + high) // 2
        if hits_at(middle) >= hits_wanted:
            high = middle
        else:
            low = middle + 1
    return high


@dataclass(frozen=True, slots=True)
class CurvePoint:
    multiple: float          # of the reference capacity (the fleet's KV)
    capacity_tokens: int
    lru_rate: float
    optimal_rate: float      # reached by Belady's evictions
    optimal_bound: float     # no eviction beats it: their block hits, at most the ceiling


def curve(accesses: BlockAccesses, reference_tokens: int,
          multiples: Sequence[float]) -> list[CurvePoint]:
    """Hit rates at each multiple of ``reference_tokens`` (rounded down to whole blocks)."""
    ceiling = infinite_hits(accesses)
    points = []
    for multiple in multiples:
        blocks = int(reference_tokens * multiple) // accesses.block_tokens
        optimal = optimal_hits(accesses, blocks)
        points.append(CurvePoint(multiple, blocks * accesses.block_tokens,
                                 rate(accesses, lru_hits(accesses, blocks)),
                                 rate(accesses, optimal.reached),
                                 rate(accesses, min(optimal.upper, ceiling))))
    return points


def rate(accesses: BlockAccesses, hit_blocks: int) -> float:
    """Hit blocks as a share of the trace's prompt tokens."""
    if accesses.prompt_tokens == 0:
        return 0.0
    return hit_blocks * accesses.block_tokens / accesses.prompt_tokens
