"""The goals of token-aware routing, judged from simulations: the cases ``kvroute scorecard``
runs, and how one case's ``summary.json`` is read against each goal.

A case is a slice of a trace (``--skip``/``--limit``, Mooncake's arrivals spread over their
3 s buckets) simulated on the mixed fleet with a goodput search for kvroute and every peer.
Each goal is a ratio of kvroute's number to a reference, with its target:

* goodput (the largest rate scale at which 90 % of requests meet the SLO) against the best
  peer's, at least 1.3 × on shared-prefix traffic and 1.1 × on unique prompts; on
  shared-prefix traffic also at least 3 × round-robin's;
* the prefix-cache hit rate against the trace's infinite-cache ceiling, at least 0.85 ×
  (shared-prefix traffic);
* the busy cost per million tokens at each one's own goodput rate (the same SLO attainment)
  against the cheapest peer's, at most 0.75 ×.

A ratio whose reference is 0 (a peer that never reaches 90 %) is infinite: the verdict says so
rather than hiding it in a large number. A goal that cannot be read (no peer has a goodput
rate to compare costs at) is ``None``, neither met nor missed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

Traffic = Literal["shared-prefix", "unique-prompt"]

KVROUTE = "kvroute"
# policies.peers.presets.PEER_NAMES, written out: importing the presets builds every plugin,
# too slow for ``kvroute --help`` (a test keeps the two equal)
PEERS: tuple[str, ...] = ("round-robin", "least-requests", "sglang-cache-aware", "llm-d-default",
                          "dynamo-kv", "production-stack-prefix")
MOONCAKE = "mooncake_conversation_trace.jsonl.gz"
AZURE_CODE = "azure_llm_2023_code.csv.gz"
SERVEGEN_R1 = "servegen/servegen_reason_deepseek-r1.tar.gz"


@dataclass(frozen=True, slots=True)
class ServeGenSpan:
    """A trace drawn from a ServeGen archive (``sim.servegen``) before the case runs."""

    archive: str        # relative to the traces directory
    start_s: float
    duration_s: float


@dataclass(frozen=True, slots=True)
class Case:
    """One simulated slice of a trace and the goals it is judged on."""

    name: str
    traffic: Traffic
    trace: str                      # relative to the traces directory ("" for ServeGen)
    about: str                      # what the slice is, for the table
    skip: int = 0
    limit: int | None = None
    jitter_s: float = 0.0
    servegen: ServeGenSpan | None = None


DEFAULT_CASES: tuple[Case, ...] = (
    Case("mooncake-1-1000", "shared-prefix", MOONCAKE,
         "Mooncake conversations, requests 1–1,000 (development slice)",
         limit=1000, jitter_s=3.0),
    Case("mooncake-6001-7000", "shared-prefix", MOONCAKE,
         "Mooncake conversations, requests 6,001–7,000 (held-out slice)",
         skip=6000, limit=1000, jitter_s=3.0),
    Case("mooncake-9001-10000", "shared-prefix", MOONCAKE,
         "Mooncake conversations, requests 9,001–10,000 (held-out slice)",
         skip=9000, limit=1000, jitter_s=3.0),
    Case("azure-1-1500", "unique-prompt", AZURE_CODE,
         "Azure code, requests 1–1,500 (development slice)", limit=1500),
    Case("azure-4001-5500", "unique-prompt", AZURE_CODE,
         "Azure code, requests 4,001–5,500 (held-out slice)", skip=4000, limit=1500),
    Case("azure-6001-7500", "unique-prompt", AZURE_CODE,
         "Azure code, requests 6,001–7,500 (held-out slice)", skip=6000, limit=1500),
    Case("servegen-r1-43200-300", "unique-prompt", "",
         "ServeGen deepseek-r1 (long reasoning outputs), 300 s from noon (a trace never tuned on)",
         servegen=ServeGenSpan(SERVEGEN_R1, 43_200.0, 300.0)),
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One goal on one case: kvroute's value, the reference's, their ratio and the target."""

    case: str
    goal: str
    value: float | None
    reference: float | None
    reference_name: str
    ratio: float | None             # math.inf when the reference is 0 and the value is not
    target: float
    at_most: bool                   # the ratio must stay at or below the target (cost)
    met: bool | None                # None: the goal cannot be read on this case
    value_capped: bool = False      # the value is a lower bound (a goodput search that never
    reference_capped: bool = False  # failed), as is the reference's

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.ratio is not None and math.isinf(self.ratio):
            data["ratio"] = "inf"
        return data


GOODPUT_TARGET: Mapping[Traffic, float] = {"shared-prefix": 1.3, "unique-prompt": 1.1}
ROUND_ROBIN_TARGET = 3.0
PREFIX_TARGET = 0.85
COST_TARGET = 0.75


def judge(case: Case, summary: Mapping[str, Any], policy: str = KVROUTE) -> list[Verdict]:
    """Every goal of ``case`` read from its ``summary.json`` (``policy`` is the one judged;
    every other policy in the summary is a peer)."""
    entries: Mapping[str, Mapping[str, Any]] = summary["policies"]
    if policy not in entries:
        raise KeyError(f"{case.name}: the summary has no policy {policy!r} "
                       f"(it has {', '.join(entries)})")
    own = entries[policy]
    peers = {name: entry for name, entry in entries.items() if name != policy}
    verdicts = [_goodput_against_best(case, own, peers)]
    if case.traffic == "shared-prefix":
        if "round-robin" in peers:
            verdicts.append(_bounded(_ratio(case, "goodput against round-robin",
                                            own["goodput_rate_scale"],
                                            peers["round-robin"]["goodput_rate_scale"],
                                            "round-robin", ROUND_ROBIN_TARGET),
                                     own, peers["round-robin"]))
        ceiling = own.get("prefix_hit_ceiling", summary["trace"].get("prefix_hit_ceiling"))
        verdicts.append(_ratio(case, "prefix hit rate against the infinite-cache ceiling",
                               own["prefix_hit_rate"], ceiling, "ceiling", PREFIX_TARGET))
    verdicts.append(_cost_against_cheapest(case, own, peers))
    return verdicts


def _goodput_against_best(case: Case, own: Mapping[str, Any],
                          peers: Mapping[str, Mapping[str, Any]]) -> Verdict:
    if not peers:
        return _ratio(case, "goodput against the best peer", own["goodput_rate_scale"], None,
                      "no peer", GOODPUT_TARGET[case.traffic])
    best = max(peers, key=lambda name: peers[name]["goodput_rate_scale"] or 0.0)
    return _bounded(_ratio(case, "goodput against the best peer", own["goodput_rate_scale"],
                           peers[best]["goodput_rate_scale"], best,
                           GOODPUT_TARGET[case.traffic]), own, peers[best])


def _bounded(verdict: Verdict, own: Mapping[str, Any], peer: Mapping[str, Any]) -> Verdict:
    """A goodput verdict where a search never failed (``goodput_capped``: the scale is a
    lower bound): met only if the bound alone meets it, else not readable."""
    value_capped = bool(own.get("goodput_capped"))
    reference_capped = bool(peer.get("goodput_capped"))
    if not (value_capped or reference_capped):
        return verdict
    if value_capped and reference_capped:
        met = None          # two lower bounds: their ratio is anything
    elif value_capped:
        met = True if verdict.met else None      # at least the ratio shown
    else:
        met = False if verdict.met is False else None   # at most the ratio shown
    return replace(verdict, met=met, value_capped=value_capped,
                   reference_capped=reference_capped)


def _cost_against_cheapest(case: Case, own: Mapping[str, Any],
                           peers: Mapping[str, Mapping[str, Any]]) -> Verdict:
    """Busy $/Mtok at each one's goodput rate: only peers that have one are compared."""
    priced = {name: entry["goodput_cost_per_mtok_busy"] for name, entry in peers.items()
              if entry.get("goodput_cost_per_mtok_busy") is not None}
    goal = "busy cost per Mtok at goodput against the cheapest peer's"
    value = own.get("goodput_cost_per_mtok_busy")
    if not priced:
        return Verdict(case.name, goal, value, None, "no peer reaches 90 % SLO", None,
                       COST_TARGET, True, None)
    cheapest = min(priced, key=lambda name: priced[name])
    if value is None:           # kvroute never reaches 90 %: it has no cost to compare
        return Verdict(case.name, goal, None, priced[cheapest], cheapest, None, COST_TARGET,
                       True, False)
    verdict = _ratio(case, goal, value, priced[cheapest], cheapest, COST_TARGET, at_most=True)
    value_capped = bool(own.get("goodput_capped"))
    reference_capped = bool(peers[cheapest].get("goodput_capped"))
    if value_capped or reference_capped:
        # priced at a scale that is only a lower bound of its goodput: not at the same
        # attainment as the other, so the comparison is not readable
        return replace(verdict, met=None, value_capped=value_capped,
                       reference_capped=reference_capped)
    return verdict


def _ratio(case: Case, goal: str, value: float | None, reference: float | None,
           reference_name: str, target: float, at_most: bool = False) -> Verdict:
    if value is None or reference is None:
        return Verdict(case.name, goal, value, reference, reference_name, None, target,
                       at_most, None)
    if reference > 0:
        ratio: float | None = value / reference
    elif value > 0:
        ratio = math.inf
    else:
        ratio = None            # 0 against 0: neither reaches the goal's measure
    if ratio is None:
        met: bool | None = None if at_most else False
    else:
        met = ratio <= target if at_most else ratio >= target
    return Verdict(case.name, goal, value, reference, reference_name, ratio, target, at_most,
                   met)


def markdown(cases: Sequence[Case], verdicts: Sequence[Verdict], policy: str = KVROUTE) -> str:
    """The verdicts as one table (a row per case and goal; ``policy``: the judged one's
    name, its column's head), then each goal's count."""
    about = {case.name: case.about for case in cases}
    lines = [f"| case | goal | {policy} | reference | ratio | target | met |",
             "|---|---|--:|---|--:|--:|---|"]
    for v in verdicts:
        reference = (f"{v.reference_name} {_bound(v.reference_capped)}{_number(v.reference)}"
                     if v.reference is not None else v.reference_name)
        target = f"{'≤' if v.at_most else '≥'} {v.target:g} ×"
        lines.append(f"| {about.get(v.case, v.case)} | {v.goal} | {_bound(v.value_capped)}"
                     f"{_number(v.value)} | "
                     f"{reference} | {_bounded_ratio_text(v)} | {target} | {_met_text(v)} |")
    lines += ["", "| goal | met | missed | not readable |", "|---|--:|--:|--:|"]
    for goal in dict.fromkeys(v.goal for v in verdicts):
        of_goal = [v for v in verdicts if v.goal == goal]
        lines.append(f"| {goal} | {sum(v.met is True for v in of_goal)} | "
                     f"{sum(v.met is False for v in of_goal)} | "
                     f"{sum(v.met is None for v in of_goal)} |")
    return "\n".join(lines) + "\n"


def _bound(capped: bool) -> str:
    return "≥ " if capped else ""


def _number(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:,.1f}"


def _bounded_ratio_text(verdict: Verdict) -> str:
    """The ratio, as a bound where a goodput search never failed on one side."""
    if verdict.value_capped and verdict.reference_capped:
        return "–"
    bound = "≥ " if verdict.value_capped else "≤ " if verdict.reference_capped else ""
    text = _ratio_text(verdict.ratio)
    return text if text == "–" else bound + text


def _ratio_text(ratio: float | None) -> str:
    if ratio is None:
        return "–"
    return "∞" if math.isinf(ratio) else f"{ratio:.2f} ×"


def _met_text(verdict: Verdict) -> str:
    if verdict.met is None:
        return "not readable"
    if verdict.met and verdict.ratio is not None and math.isinf(verdict.ratio):
        return "yes (the reference is 0)"
    return "yes" if verdict.met else "**no**"


__all__ = ["AZURE_CODE", "COST_TARGET", "DEFAULT_CASES", "GOODPUT_TARGET", "KVROUTE", "MOONCAKE",
           "PEERS", "PREFIX_TARGET", "ROUND_ROBIN_TARGET", "SERVEGEN_R1", "Case", "ServeGenSpan",
           "Traffic", "Verdict", "judge", "markdown"]
