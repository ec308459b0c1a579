"""Counter totals read from a Prometheus ``/metrics`` page, for the benchmarks' before/after
deltas: the workers' ``vllm:*`` prefix-cache counters and the router's own ``kvroute_*``
prefix counters (``kvroute_prefix_known_*`` and the ceiling's query tokens)."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping, Sequence

from prometheus_client.parser import text_string_to_metric_families

ROUTER_PREFIX_COUNTERS = ("kvroute_prefix_known_chosen_tokens",
                          "kvroute_prefix_known_best_tokens",
                          "kvroute_prefix_ceiling_query_tokens")


def scrape_totals(url: str, names: Sequence[str], headers: Mapping[str, str] | None = None,
                  timeout_s: float = 5.0) -> dict[str, float] | None:
    """Each named counter family's summed ``_total`` samples at ``url`` (``…/metrics``); a
    family the page lacks is absent from the result. None when the page cannot be read."""
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            text = response.read().decode()
    except OSError:
        return None
    wanted = set(names)
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name in wanted:
            totals[family.name] = sum(s.value for s in family.samples
                                      if s.name.endswith("_total"))
    return totals


def known_prefix_shares(before: Mapping[str, float] | None, after: Mapping[str, float] | None
                        ) -> tuple[float | None, float | None]:
    """(chosen, best): the cached prefix a kvroute router believed its decisions' chosen
    workers, and the best-placed candidates, held over a run, as shares of the prompt tokens
    it looked up. None for a router without these counters or without a prefix plugin (no
    prompt tokens looked up)."""
    if before is None or after is None or not all(
            name in before and name in after for name in ROUTER_PREFIX_COUNTERS):
        return None, None
    chosen, best, queried = (after[n] - before[n] for n in ROUTER_PREFIX_COUNTERS)
    if queried <= 0:
        return None, None
    return round(chosen / queried, 4), round(best / queried, 4)
