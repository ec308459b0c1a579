"""SGLang's ``cache_aware`` policy: prefix affinity on a radix tree, gated by a balance guard.

Source rule (sgl-model-gateway ``src/policies/cache_aware.rs``; peer-routers.md §2.2.1)::

    load[w]    = router-tracked in-flight requests of w
    imbalanced = max_load - min_load > balance_abs_threshold
                 and max_load > balance_rel_threshold * min_load
    if imbalanced:   w* = argmin load                      (first minimum, as Rust's min_by_key)
    else:            (matched, tenant) = tree.prefix_match(prompt)
                     w* = tenant if matched / len(prompt) > cache_threshold else argmin load
    tree.insert(prompt, w*)                                 (in both branches)
    every eviction_interval_secs: evict LRU leaves per worker until size <= max_tree_size

Defaults are the CLI / Python ``RouterArgs`` ones (not Rust ``CacheAwareConfig::default()``):
cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold 1.5,
eviction_interval_secs 60, max_tree_size 2**26. ``sglang-cache-aware`` keys its trees on the
prompt's characters, as SGLang's router does in front of HTTP workers (vLLM's): the text of
the chat messages joined with line breaks, or the completion's prompt, and on token ids only
where a request has no text (a token-id prompt; the simulator's). ``sglang-cache-aware-tokens``
keys them on the token ids of the router's ``tokens`` producer, as its gRPC path does on the
engine's tokens (the chat template included: short chats share its header). One tree per worker
(SGLang keeps one multi-tenant tree; the longest match per worker is the same); among workers
with the same longest match the first candidate wins. Time is the request's arrival time, so
eviction runs identically live and in the simulator.

The scorer gives the chosen worker 1.0 and every other 0.0; pair it with ``max-score``::

    profiles:
      sglang:
        scorers:
          - {type: sglang-cache-aware, weight: 1,
             params: {cache_threshold: 0.3, balance_abs_threshold: 64, balance_rel_threshold: 1.5}}
        picker: {type: max-score}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.base import CycleState, Decision, RequestOutcome, RoutingRequest
from policies.cycle_keys import record_worker_attribute, set_reason
from policies.errors import ParamError
from policies.peers.prompt import prompt_text, prompt_units
from policies.peers.radix_tree import ApproxRadixTree
from policies.registry import PluginRegistry
from workers.models import WorkerView

TYPE_NAME = "sglang-cache-aware"
TOKENS_TYPE_NAME = "sglang-cache-aware-tokens"


@dataclass(frozen=True, slots=True)
class SglangCacheAwareParams:
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    eviction_interval_secs: float = 60.0
    max_tree_size: int = 2 ** 26

    def __post_init__(self) -> None:
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise ParamError("cache_threshold", "must be between 0 and 1")
        if self.balance_abs_threshold < 0:
            raise ParamError("balance_abs_threshold", "must be >= 0")
        if self.eviction_interval_secs <= 0:
            raise ParamError("eviction_interval_secs", "must be > 0")
        if self.max_tree_size <= 0:
            raise ParamError("max_tree_size", "must be > 0")


class SglangCacheAwareScorer:
    """One-hot scorer reproducing SGLang's ``cache_aware`` choice; observes routed requests."""

    def __init__(self, params: SglangCacheAwareParams | None = None,
                 name: str = TYPE_NAME, on_tokens: bool = False) -> None:
        self.name = name
        self.on_tokens = on_tokens     # keyed on token ids (gRPC), else on characters (HTTP)
        params = params or SglangCacheAwareParams()
        self.cache_threshold = params.cache_threshold
        self.balance_abs_threshold = params.balance_abs_threshold
        self.balance_rel_threshold = params.balance_rel_threshold
        self.eviction_interval_secs = params.eviction_interval_secs
        self.max_tree_size = params.max_tree_size
        self._trees: dict[str, ApproxRadixTree] = {}
        self._last_eviction: float | None = None

    def tree(self, worker_id: str) -> ApproxRadixTree:
        tree = self._trees.get(worker_id)
        if tree is None:
            tree = self._trees[worker_id] = ApproxRadixTree()
        return tree

    def choose(self, request: RoutingRequest,
               workers: Sequence[WorkerView]) -> tuple[str | None, str, int]:
        """The worker SGLang would pick, why (``balance``, ``cache``, ``min-load``) and the
        longest prefix (units) any candidate's tree holds (0 when the guard decided)."""
        if not workers:
            return None, "no-candidate", 0
        loads = [w.inflight_requests for w in workers]
        max_load, min_load = max(loads), min(loads)
        shortest = workers[loads.index(min_load)].id
        if (max_load - min_load > self.balance_abs_threshold
                and max_load > self.balance_rel_threshold * min_load):
            return shortest, "balance", 0
        units = self.units(request)
        if not units:
            return shortest, "min-load", 0
        best_id, best_match = shortest, 0
        for view in workers:
            matched = self.tree(view.id).match_length(units, request.arrival_time)
            if matched > best_match:
                best_id, best_match = view.id, matched
        if best_match / len(units) > self.cache_threshold:
            return best_id, "cache", best_match
        return shortest, "min-load", best_match

    def units(self, request: RoutingRequest) -> tuple[int, ...]:
        """What the trees key on: the prompt's token ids, or its characters' code points
        (its token ids when it has no text)."""
        if not self.on_tokens:
            text = prompt_text(request)
            if text:
                return tuple(map(ord, text))
        return tuple(prompt_units(request))

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        choice, reason, matched = self.choose(request, workers)
        if choice is not None:
            set_reason(cycle, f"sglang cache_aware: {reason} (longest match {matched})", reason)
            if reason == "cache" and self.on_tokens:     # (characters are not tokens)
                record_worker_attribute(cycle, "prefix_match_tokens", choice, matched)
        return {view.id: 1.0 if view.id == choice else 0.0 for view in workers}

    def inherit_state(self, previous: object) -> None:
        """On a routing reload, keep the trees the previous instance built."""
        if isinstance(previous, SglangCacheAwareScorer) and previous.on_tokens == self.on_tokens:
            self._trees = previous._trees
            self._last_eviction = previous._last_eviction

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        if decision.worker_id is None:
            return
        now = request.arrival_time
        self.tree(decision.worker_id).insert(self.units(request), now)
        if self._last_eviction is None:
            self._last_eviction = now
        elif now - self._last_eviction >= self.eviction_interval_secs:
            self._last_eviction = now
            for tree in self._trees.values():
                tree.evict_to(self.max_tree_size)

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        """Load is the router's in-flight count, already in the views."""


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", SglangCacheAwareParams,
                      lambda params, ctx: SglangCacheAwareScorer(params, ctx.name))
    registry.register(TOKENS_TYPE_NAME, "scorer", SglangCacheAwareParams,
                      lambda params, ctx: SglangCacheAwareScorer(params, ctx.name,
                                                                 on_tokens=True),
                      needs=("prompt_token_ids",))
