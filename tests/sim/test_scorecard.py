"""How a case's summary is judged against the goals (pure logic on hand-made summaries)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from policies.peers.presets import PEER_NAMES
from sim.scorecard import DEFAULT_CASES, PEERS, Case, Verdict, judge, markdown

SHARED = Case("shared", "shared-prefix", "t.jsonl.gz", "a shared-prefix slice")
UNIQUE = Case("unique", "unique-prompt", "t.csv.gz", "a unique-prompt slice")


def _entry(goodput: float, cost: float | None, hit: float = 0.0,
           ceiling: float = 0.2) -> dict[str, Any]:
    return {"goodput_rate_scale": goodput, "goodput_cost_per_mtok_busy": cost,
            "prefix_hit_rate": hit, "prefix_hit_ceiling": ceiling}


def _summary(**entries: dict[str, Any]) -> dict[str, Any]:
    return {"trace": {"prefix_hit_ceiling": 0.2},
            "policies": {name.replace("_", "-"): e for name, e in entries.items()}}


def _by_goal(verdicts: list[Verdict]) -> dict[str, Verdict]:
    return {v.goal: v for v in verdicts}


def test_unique_prompts_are_judged_on_goodput_and_cost_against_the_best_peers() -> None:
    summary = _summary(kvroute=_entry(2.4, 0.06), round_robin=_entry(1.0, 0.08),
                       sglang_cache_aware=_entry(2.0, 0.09), llm_d_default=_entry(1.5, 0.07))
    verdicts = _by_goal(judge(UNIQUE, summary))
    assert list(verdicts) == ["goodput against the best peer",
                              "busy cost per Mtok at goodput against the cheapest peer's"]
    goodput = verdicts["goodput against the best peer"]
    assert goodput.reference_name == "sglang-cache-aware"       # the highest goodput
    assert goodput.ratio == pytest.approx(1.2) and goodput.target == 1.1 and goodput.met
    cost = verdicts["busy cost per Mtok at goodput against the cheapest peer's"]
    assert cost.reference_name == "llm-d-default"                # the cheapest at its goodput
    assert cost.ratio == pytest.approx(0.06 / 0.07) and cost.at_most and cost.met is False


def test_shared_prefixes_add_round_robin_and_the_prefix_ceiling() -> None:
    summary = _summary(kvroute=_entry(0.9, 0.09, hit=0.10, ceiling=0.20),
                       round_robin=_entry(0.25, 0.30), sglang_cache_aware=_entry(0.6, 0.12))
    verdicts = _by_goal(judge(SHARED, summary))
    assert verdicts["goodput against the best peer"].ratio == pytest.approx(1.5)
    assert verdicts["goodput against the best peer"].met            # 1.3 x on shared prefixes
    assert verdicts["goodput against round-robin"].ratio == pytest.approx(3.6)
    prefix = verdicts["prefix hit rate against the infinite-cache ceiling"]
    assert prefix.ratio == pytest.approx(0.5) and prefix.met is False and prefix.target == 0.85
    cost = verdicts["busy cost per Mtok at goodput against the cheapest peer's"]
    assert cost.ratio == pytest.approx(0.75) and cost.met         # at the target exactly


def test_a_peer_that_never_reaches_the_slo_gives_an_infinite_ratio_said_as_such() -> None:
    summary = _summary(kvroute=_entry(0.7, 0.09, hit=0.1), round_robin=_entry(0.0, None),
                       llm_d_default=_entry(0.0, None))
    verdicts = _by_goal(judge(SHARED, summary))
    goodput = verdicts["goodput against the best peer"]
    assert math.isinf(goodput.ratio or 0.0) and goodput.met
    assert goodput.as_json()["ratio"] == "inf"
    # no peer has a goodput rate: costs at the same attainment cannot be compared
    cost = verdicts["busy cost per Mtok at goodput against the cheapest peer's"]
    assert cost.met is None and cost.reference_name == "no peer reaches 90 % SLO"
    table = markdown([SHARED], list(verdicts.values()))
    assert "| ∞ | ≥ 1.3 × | yes (the reference is 0) |" in table
    assert "not readable" in table


def test_kvroute_without_a_goodput_rate_misses_goodput_and_cost() -> None:
    summary = _summary(kvroute=_entry(0.0, None), round_robin=_entry(0.0, None),
                       sglang_cache_aware=_entry(0.5, 0.1))
    verdicts = _by_goal(judge(UNIQUE, summary))
    assert verdicts["goodput against the best peer"].met is False
    assert verdicts["busy cost per Mtok at goodput against the cheapest peer's"].met is False
    both_zero = _by_goal(judge(UNIQUE, _summary(kvroute=_entry(0.0, None),
                                                round_robin=_entry(0.0, None))))
    assert both_zero["goodput against the best peer"].ratio is None
    assert both_zero["goodput against the best peer"].met is False


def test_a_summary_without_the_judged_policy_is_named() -> None:
    with pytest.raises(KeyError, match=r"no policy .kvroute. .*it has round-robin"):
        judge(UNIQUE, _summary(round_robin=_entry(1.0, 0.1)))


def test_the_table_counts_each_goal_over_the_cases() -> None:
    summaries = [_summary(kvroute=_entry(g, 0.05), round_robin=_entry(1.0, 0.1))
                 for g in (1.2, 1.05)]
    cases = [Case(f"c{i}", "unique-prompt", "t.csv", f"slice {i}") for i in range(2)]
    verdicts = [v for case, s in zip(cases, summaries, strict=True) for v in judge(case, s)]
    table = markdown(cases, verdicts)
    assert "| slice 1 | goodput against the best peer | 1.050 | round-robin 1.000 | 1.05 × |" \
        in table
    assert "| goodput against the best peer | 1 | 1 | 0 |" in table
    assert "| busy cost per Mtok at goodput against the cheapest peer's | 2 | 0 | 0 |" in table


def test_the_default_cases_have_unique_names_and_spread_their_slices() -> None:
    names = [case.name for case in DEFAULT_CASES]
    assert len(set(names)) == len(names)
    assert {case.traffic for case in DEFAULT_CASES} == {"shared-prefix", "unique-prompt"}
    mooncake = [c for c in DEFAULT_CASES if c.trace.startswith("mooncake")]
    assert all(c.jitter_s == 3.0 for c in mooncake)      # arrivals spread over 3 s buckets
    assert sorted(c.skip for c in mooncake) == [0, 6000, 9000]


def test_the_peers_are_every_preset() -> None:
    assert PEERS == PEER_NAMES


def test_a_goodput_search_that_never_failed_is_a_bound_not_a_value() -> None:
    capped = {**_entry(64.0, 0.06), "goodput_capped": True}
    both = judge(UNIQUE, _summary(kvroute=capped, round_robin={**_entry(64.0, 0.08),
                                                               "goodput_capped": True}))[0]
    assert (both.met, both.value_capped, both.reference_capped) == (None, True, True)
    ahead = judge(UNIQUE, _summary(kvroute=capped, round_robin=_entry(32.0, 0.08)))[0]
    assert ahead.met is True and ahead.ratio == 2.0      # at least 2 ×: the goal is met
    close = judge(UNIQUE, _summary(kvroute=capped, round_robin=_entry(60.0, 0.08)))[0]
    assert close.met is None                             # at least 1.07 ×: cannot say
    behind = judge(UNIQUE, _summary(kvroute=_entry(8.0, 0.06), round_robin={
        **_entry(64.0, 0.08), "goodput_capped": True}))[0]
    assert behind.met is False and behind.reference_capped     # at most 0.12 ×: a miss
    table = markdown([UNIQUE], [both, ahead, behind])
    assert "| ≥ 64.0 | round-robin ≥ 64.0 | – |" in table
    assert "| ≥ 64.0 | round-robin 32.0 | ≥ 2.00 × |" in table
    assert "| 8.000 | round-robin ≥ 64.0 | ≤ 0.12 × |" in table


def test_a_ratio_under_target_against_a_capped_reference_is_a_miss() -> None:
    """The reference's goodput is at least its value, so the ratio is at most the one
    shown: under the target it is a miss, not 'not readable'."""
    capped_rr = {**_entry(64.0, 0.08), "goodput_capped": True}
    [miss, _cost] = judge(UNIQUE, _summary(kvroute=_entry(2.0, 0.06), round_robin=capped_rr))
    assert miss.met is False and miss.reference_capped and not miss.value_capped


def test_a_cost_priced_at_a_capped_goodput_is_not_readable() -> None:
    """The cost at goodput is priced at the goodput scale: a capped search's scale is below
    its goodput, so its attainment is not the 90 % the comparison assumes."""
    capped = {**_entry(64.0, 0.06), "goodput_capped": True}
    _goodput, cost = judge(UNIQUE, _summary(kvroute=capped, round_robin=_entry(2.0, 0.10)))
    assert cost.met is None and cost.value_capped
