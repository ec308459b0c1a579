"""How many prompt tokens each worker already caches, from the best index that knows.

For each worker: the exact KV-event index when one is attached and that worker's stream is
whole (or, when longer, the prefix its unfinished requests hold: ``policies.prefix.inflight``),
otherwise the approximate (routing-learnt) index. Hits are counted as vLLM counts them:
whole blocks from block 0 up to the first miss, capped so that at least one prompt token is
recomputed (``vllm-interface.md`` §4.2). The result is written into the ``CycleState`` so that
later plugins of the same decision (estimated time, cost, the SLO picker) reuse it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from policies.base import CycleState, RoutingRequest
from policies.prefix.approximate import ApproximatePrefixIndex
from policies.prefix.inflight import InflightBlocks
from workers.kv_events.exact_index import ExactPrefixIndex
from workers.models import WorkerView

MATCH_KEY = "prefix.match"   # CycleState key -> PrefixMatch


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    tokens: Mapping[str, int]        # worker id -> cached prompt tokens (absent: 0)
    exact: frozenset[str]            # workers whose count came from KV events


def cached_tokens(cycle: CycleState, worker_id: str) -> int:
    """Cached prompt tokens of ``worker_id`` found earlier in this decision (0 if none)."""
    match: PrefixMatch | None = cycle.read(MATCH_KEY)
    return match.tokens.get(worker_id, 0) if match is not None else 0


def match_prefix(request: RoutingRequest, workers: Sequence[WorkerView],
                 approximate: ApproximatePrefixIndex, exact: ExactPrefixIndex | None,
                 worker_ids: Sequence[str] | None = None,
                 members: Collection[str] | None = None,
                 inflight: InflightBlocks | None = None) -> PrefixMatch:
    """Cached prompt tokens per worker for this request (``worker_ids``: the views' ids, in
    view order, when already at hand; ``members``: the same ids as a set or dict, for fast
    membership; ``inflight``: the unfinished requests' blocks, counted for exact workers)."""
    tokens: dict[str, int] = {}
    exact_ids: set[str] = set()
    ids = worker_ids if worker_ids is not None else [view.info.id for view in workers]
    limit = request.num_prompt_tokens - 1
    for block_size, group in _by_block_size(workers, ids).items():
        chain = request.block_hashes.get(block_size)
        if not chain or block_size <= 0:
            continue
        fallback: Collection[str] = ()
        if exact is not None:
            missing: list[str] = []
            for worker_id in group:
                blocks = exact.match(worker_id, chain)
                if blocks is None:
                    missing.append(worker_id)
                else:
                    exact_ids.add(worker_id)
                    if inflight is not None:
                        pending = inflight.match(worker_id, chain)
                        if pending > blocks:
                            blocks = pending
                    if blocks:
                        count = min(blocks * block_size, limit // block_size * block_size)
                        if count > 0:
                            tokens[worker_id] = count
            fallback = missing
        else:
            fallback = members if members is not None and group is ids else group
        if fallback:
            cap = limit // block_size * block_size
            if cap > 0:          # else every count is 0: none is kept
                for worker_id, blocks in approximate.match(chain, fallback).items():
                    count = blocks * block_size
                    # min(count, cap), with its tie rule, without the call
                    tokens[worker_id] = cap if cap < count else count
    # each worker is in one group, and counted once: those of 0 tokens were left out above
    return _new_match(tokens, frozenset(exact_ids))


# PrefixMatch is a frozen slots dataclass without __post_init__: filled through its slot
# descriptors it is the same object its __init__ builds, in less time (one per decision).
_set_tokens = vars(PrefixMatch)["tokens"].__set__
_set_exact = vars(PrefixMatch)["exact"].__set__


def _new_match(tokens: Mapping[str, int], exact: frozenset[str]) -> PrefixMatch:
    """``PrefixMatch(tokens, exact)``."""
    match: PrefixMatch = object.__new__(PrefixMatch)
    _set_tokens(match, tokens)
    _set_exact(match, exact)
    return match


_block_size = attrgetter("block_size")


def _by_block_size(workers: Sequence[WorkerView],
                   ids: Sequence[str]) -> dict[int, Sequence[str]]:
    """Worker ids by block size, in view order (one group, ``ids`` itself, when the fleet
    shares a size)."""
    sizes = list(map(_block_size, workers))
    if not sizes:
        return {}
    if sizes.count(sizes[0]) == len(sizes):
        return {sizes[0]: ids}
    groups: dict[int, list[str]] = {}
    for size, worker_id in zip(sizes, ids, strict=True):
        groups.setdefault(size, []).append(worker_id)
    return dict(groups)
