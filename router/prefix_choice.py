"""How much of the cached prefix the router knew of its decisions kept.

For every first routing attempt, the ``prefix`` scorer leaves two counts on the decision: the
prompt tokens the router believed the chosen worker held (``prefix_match_tokens``) and the
most any candidate held (``prefix_best_tokens``). Summed into
``kvroute_prefix_known_chosen_tokens`` and ``kvroute_prefix_known_best_tokens``, their ratio
is the share of the known cached prefix the decisions kept; the rest was passed over for a
worker the policy preferred (a cached worker estimated past the SLO, load, price). Both are
labelled with the decision's deciding term (``reason``, as on ``kvroute_decisions_total``),
so that the prefix passed over can be split by why. This is
the router's knowledge (KV events where followed, otherwise its routing history), not the
caches' own state; the workers' ``vllm:prefix_cache_hits`` say what was really hit.
"""

from __future__ import annotations

from policies.base import Decision, RoutingRequest
from policies.scorers.prefix import ATTRIBUTE, BEST_ATTRIBUTE
from router.decisions import reason_code
from router.metrics import RouterMetrics


class PrefixChoice:
    """Counts the known cached prefix chosen and on offer; a decision sink of the director."""

    __slots__ = ("_metrics",)

    def __init__(self, metrics: RouterMetrics) -> None:
        self._metrics = metrics

    def on_decision(self, request: RoutingRequest, decision: Decision, attempt: int,
                    seconds: float, routing_sha256: str | None = None) -> None:
        if attempt != 0 or decision.worker_id is None:
            return
        best = decision.attributes.get(BEST_ATTRIBUTE)
        if not isinstance(best, int):
            return          # no prefix scorer in this profile
        chosen = decision.attributes.get(ATTRIBUTE)
        self._metrics.record_prefix_choice(chosen if isinstance(chosen, int) else 0, best,
                                           reason_code(decision))
