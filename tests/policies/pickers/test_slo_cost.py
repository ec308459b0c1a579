"""The slo-cost picker: cheapest within the SLO, sticky on the prefix, else the fastest."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from policies.base import CandidateScore, CycleState, Decision, RequestOutcome, RoutingRequest
from policies.cycle_keys import REASON
from policies.errors import ParamError
from policies.latency.estimator import ESTIMATES_KEY, IDLE_PREFILL_KEY, Estimate
from policies.pickers.slo_cost import SloCostParams, SloCostPicker
from workers.models import WorkerView

REPO_ROOT = Path(__file__).resolve().parents[3]


def estimate(ttft: float, tpot: float, cost: float, cached: int = 0,
             gpu_s: float = 1.0) -> Estimate:
    return Estimate(ttft_s=ttft, tpot_s=tpot, gpu_s=gpu_s, cost_usd=cost, cached_tokens=cached,
                    raw_ttft_s=ttft, raw_tpot_s=tpot)


def decide(estimates: dict[str, Estimate], idle_prefill: float = 0.0,
           params: SloCostParams | None = None, totals: dict[str, float] | None = None,
           tokens: int = 1_000) -> tuple[str, tuple[str, str]]:
    picker = SloCostPicker("slo-cost", params or SloCostParams(), ttft_s=0.5, tpot_s=0.05)
    cycle = CycleState()
    cycle.write(ESTIMATES_KEY, estimates)
    cycle.write(IDLE_PREFILL_KEY, idle_prefill)
    request = RoutingRequest(request_id="r", model="m")
    request.num_prompt_tokens = tokens
    candidates = [CandidateScore(w, (totals or {}).get(w, 0.0), {}) for w in estimates]
    chosen = picker.pick(request, candidates, cycle)
    return chosen.worker_id, cycle.read(REASON)


def test_cheapest_candidate_within_the_slo_wins() -> None:
    chosen, (text, term) = decide({
        "h100": estimate(0.10, 0.010, 0.0009, gpu_s=1.0),
        "l40s": estimate(0.35, 0.030, 0.0004, gpu_s=1.5),
        "a100": estimate(0.45, 0.030, 0.0001)})       # over 0.8 x 0.5 s: not within
    assert chosen == "l40s" and term == "price"
    assert text == ("price: prefix 0.00 on l40s; est ttft 0.35s vs 0.10s on h100; "
                    "tpot 30ms vs 10ms; cost $0.00040 vs $0.00090")


def test_a_short_request_s_cost_shows_two_significant_digits() -> None:
    # millionths of a dollar: four decimals would show $0.0000 for both and hide the price
    chosen, (text, term) = decide({
        "h100": estimate(0.10, 0.010, 0.0000213, gpu_s=1.0),
        "l40s": estimate(0.35, 0.030, 0.0000071, gpu_s=1.5)})
    assert chosen == "l40s" and term == "price"
    assert text.endswith("cost $0.0000071 vs $0.000021")
    _, (alone, _) = decide({"a100": estimate(0.2, 0.02, 0.00042)})
    assert alone.endswith("cost $0.00042")
    _, (free, _) = decide({"a100": estimate(0.2, 0.02, 0.0)})
    assert free.endswith("cost $0.0000")


def test_a_lone_candidate_is_named_so_not_the_only_one_within_the_slo() -> None:
    """A worker left alone by a rule's pool was explained as ``only-within-slo``, as if the
    others had missed the SLO."""
    _, (text, term) = decide({"a100": estimate(0.2, 0.02, 0.00042)})
    assert term == "only-candidate"
    assert text == "only-candidate: prefix 0.00 on a100; est ttft 0.20s; tpot 20ms; cost $0.00042"
    _, (_, term) = decide({"a100": estimate(0.2, 0.02, 0.00042),
                           "l40s": estimate(0.9, 0.02, 0.0001)})
    assert term == "only-within-slo"


def test_longest_cached_prefix_is_kept_before_comparing_cost() -> None:
    chosen, (text, term) = decide({
        "w1": estimate(0.2, 0.02, 0.0002, cached=100),
        "w3": estimate(0.2, 0.02, 0.0004, cached=820)})
    assert chosen == "w3" and term == "prefix"
    assert text.startswith("prefix: prefix 0.82 on w3; est ttft 0.20s vs 0.20s on w1")


def test_fast_gpus_are_kept_in_reserve_for_prompts_a_slower_one_serves_in_time() -> None:
    # the H100 is cheaper for this request, but the L40S meets the SLO too
    on_h100 = Estimate(0.12, 0.01, 0.5, 0.0003, 0, 0.12, 0.01, prefill_s=0.1,
                       full_prefill_s=0.1)
    on_l40s = Estimate(0.35, 0.03, 1.5, 0.0004, 0, 0.35, 0.03, prefill_s=0.3,
                       full_prefill_s=0.3)
    chosen, (text, term) = decide({"h100": on_h100, "l40s": on_l40s})
    assert chosen == "l40s" and term == "reserve-fast"     # the reserve decided, not load
    assert text.startswith("reserve-fast: prefix 0.00 on l40s; est ttft 0.35s vs 0.12s on "
                           "h100;")
    chosen, (_, term) = decide({"h100": on_h100, "l40s": on_l40s},
                               params=SloCostParams(reserve_fast=False))
    assert chosen == "h100" and term == "load"       # cheaper by being faster
    # the reserve keeps the L40S alone, but it was the cheapest anyway: price decided
    cheaper_l40s = on_l40s._replace(cost_usd=0.0002)
    assert decide({"h100": on_h100, "l40s": cheaper_l40s})[1][1] == "price"


@pytest.mark.parametrize(("faster_prefill_s", "reserved"), [(0.19, False), (0.16, True)])
def test_a_gpu_within_ten_percent_of_the_slowest_is_not_kept_in_reserve(
        faster_prefill_s: float, reserved: bool) -> None:
    """Only hardware more than 10 % faster than the slowest within the SLO is kept free: a
    looser tolerance left a GPU 20 % faster serving short prompts a slower one serves in
    time, a tighter one reserved a GPU that is barely faster."""
    faster = Estimate(0.2, 0.01, 0.8, 0.0003, 0, 0.2, 0.01, prefill_s=faster_prefill_s,
                      full_prefill_s=faster_prefill_s)
    slower = Estimate(0.25, 0.01, 1.0, 0.0004, 0, 0.25, 0.01, prefill_s=0.2,
                      full_prefill_s=0.2)
    chosen, (_, term) = decide({"faster": faster, "slower": slower})
    assert (chosen, term) == (("slower", "reserve-fast") if reserved else ("faster", "load"))


def test_holding_more_of_the_prompt_does_not_make_a_worker_look_fast() -> None:
    """Two workers of one GPU class: the one caching part of the prompt prefills less of
    it, which is not faster hardware; it stays a candidate and, cheaper, wins."""
    cached = Estimate(0.24, 0.01, 0.9, 0.0002, 80, 0.24, 0.01, prefill_s=0.24,
                      full_prefill_s=0.3)
    uncached = Estimate(0.3, 0.01, 1.0, 0.00025, 0, 0.3, 0.01, prefill_s=0.3,
                        full_prefill_s=0.3)
    chosen, (_, term) = decide({"cold": uncached, "warm": cached})
    assert chosen == "warm" and term == "prefix"


def busy_but_cached(ttft_upper: float, cached: int = 600, tpot_upper: float = 0.04
                    ) -> Estimate:
    """Expected TTFT 0.35 s and TPOT 30 ms (within 0.5 s and 50 ms); ``ttft_upper`` and
    ``tpot_upper`` their learnt 90th percentiles."""
    return Estimate(0.35, 0.03, 1.0, 0.0003, cached, 0.35, 0.03, prefill_s=0.1,
                    ttft_upper_s=ttft_upper, tpot_upper_s=tpot_upper, full_prefill_s=0.2)


def idle_and_cold(cached: int = 0) -> Estimate:
    return Estimate(0.2, 0.02, 1.0, 0.0003, cached, 0.2, 0.02, prefill_s=0.2,
                    ttft_upper_s=0.25, tpot_upper_s=0.025, full_prefill_s=0.2)


def test_a_cached_worker_expected_within_the_slo_is_kept_over_a_cold_one() -> None:
    """Its 90th percentile misses the TTFT objective, its expected TTFT meets it: the
    worker holding 60 % of the prompt is kept, and the reason says the prefix decided."""
    estimates = {"cold": idle_and_cold(), "warm": busy_but_cached(ttft_upper=0.7)}
    chosen, (text, term) = decide(estimates)
    assert chosen == "warm" and term == "prefix"
    assert text.startswith("prefix: prefix 0.60 on warm; est ttft 0.35s vs 0.20s on cold")
    # off: only the cold worker is within the SLO by its 90th percentile
    off = SloCostParams(prefix_on_expected=False)
    assert decide(estimates, params=off)[0] == "cold"
    # the TPOT objective is judged the same way: a 90th percentile over 50 ms, expected 30 ms
    tpot_bound = {"cold": idle_and_cold(), "warm": busy_but_cached(0.4, tpot_upper=0.06)}
    assert decide(tpot_bound)[0] == "warm"
    assert decide(tpot_bound, params=off)[0] == "cold"


def test_a_cached_worker_expected_to_miss_the_slo_is_still_passed_over() -> None:
    late = busy_but_cached(ttft_upper=1.2)._replace(ttft_s=0.6)      # expected 0.6 s > 0.5 s
    assert decide({"cold": idle_and_cold(), "warm": late}) == (
        "cold", ("only-within-slo: prefix 0.00 on cold; est ttft 0.20s; tpot 20ms; "
                 "cost $0.00030", "only-within-slo"))
    slow_decode = busy_but_cached(ttft_upper=0.7)._replace(tpot_s=0.055)
    assert decide({"cold": idle_and_cold(), "warm": slow_decode})[0] == "cold"


def test_only_a_prefix_longer_than_the_tolerance_buys_the_expectation() -> None:
    """Within ``prefix_tolerance`` (0.1) of what a worker within the SLO holds, the busy
    worker is no better placed: it stays out."""
    estimates = {"cold": idle_and_cold(cached=520), "warm": busy_but_cached(0.7, cached=600)}
    assert decide(estimates)[0] == "cold"
    assert decide(estimates, params=SloCostParams(prefix_tolerance=0.05))[0] == "warm"


def test_with_nothing_within_the_slo_the_expectation_changes_nothing() -> None:
    """The rule adds to the candidates within the SLO; when there are none the closest to
    it wins, judged on the expected times already."""
    late_cold = idle_and_cold()._replace(ttft_s=0.9, ttft_upper_s=1.0)
    chosen, (_, term) = decide({"cold": late_cold, "warm": busy_but_cached(ttft_upper=0.7)})
    assert chosen == "warm" and term == "slo-fallback"


def test_long_prompts_get_a_proportional_ttft_objective() -> None:
    estimates = {"h100": estimate(1.0, 0.02, 0.002), "l40s": estimate(2.0, 0.02, 0.001)}
    assert decide(estimates, idle_prefill=0.5)[0] == "h100"      # objective 1.5 s
    assert decide(estimates, idle_prefill=1.0)[0] == "l40s"      # objective 3.0 s


def test_when_nothing_meets_the_slo_the_closest_to_it_wins() -> None:
    chosen, (_, term) = decide({"a": estimate(3.0, 0.02, 0.0001),
                                "b": estimate(1.0, 0.20, 0.0001),
                                "c": estimate(1.5, 0.03, 0.0100)})
    assert chosen == "c" and term == "slo-fallback"


def test_cost_ties_go_to_the_higher_total_score() -> None:
    chosen, _ = decide({"a": estimate(0.1, 0.01, 0.00100), "b": estimate(0.1, 0.01, 0.00102)},
                       totals={"a": 1.0, "b": 2.0})
    assert chosen == "b"


def test_without_estimates_the_highest_total_wins() -> None:
    picker = SloCostPicker("slo-cost", SloCostParams(), ttft_s=None, tpot_s=None)
    candidates = [CandidateScore("a", 1.0, {}), CandidateScore("b", 2.0, {})]
    request = RoutingRequest(request_id="r", model="m")
    assert picker.pick(request, candidates, CycleState()).worker_id == "b"
    assert picker.objectives(CycleState()) == (math.inf, math.inf)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"headroom": 0.0}, "headroom"), ({"ttft_s": -1.0}, "ttft_s"),
    ({"prefix_tolerance": 2.0}, "prefix_tolerance")])
def test_bad_params_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ParamError) as info:
        SloCostParams(**kwargs)
    assert info.value.field == field


def _kv_view(worker: str, kv_usage: float, running: int = 0, inflight: int = 0,
             inflight_decode: int = 0, inflight_prefill: int = 0) -> WorkerView:
    """A view of ``worker`` with a 100,000-token KV cache (6,250 blocks of 16); the router's
    in-flight tokens there are ``inflight_decode`` output and ``inflight_prefill`` prompt
    tokens not yet prefilled."""
    from types import MappingProxyType

    from workers.engine.profiles import BUILTIN_MODELS, H100_80GB
    from workers.models import WorkerInfo

    info = WorkerInfo(id=worker, url="http://127.0.0.1:1", gpu=H100_80GB, models=("m",),
                      model_spec=BUILTIN_MODELS["llama-3.1-8b"], price_per_hour=1.0,
                      labels=MappingProxyType({}))
    return WorkerView(info=info, running=running, waiting=0, kv_usage=kv_usage, block_size=16,
                      num_gpu_blocks=6_250, max_model_len=131_072, inflight_requests=inflight,
                      inflight_tokens=inflight_decode + inflight_prefill, healthy=True,
                      staleness_s=0.0, served_models=("m",),
                      inflight_prefill_tokens=inflight_prefill)


def _decide_with_views(estimates: dict[str, Estimate], views: list[WorkerView],
                       max_tokens: int, protect_kv: bool = True) -> tuple[str, tuple[str, str]]:
    from policies.candidate_index import CandidateIndex, share_index

    picker = SloCostPicker("slo-cost", SloCostParams(protect_kv=protect_kv,
                                                     protect_decodes=False),
                           ttft_s=0.5, tpot_s=0.05)
    cycle = CycleState()
    cycle.write(ESTIMATES_KEY, estimates)
    share_index(cycle, views, CandidateIndex([v.info for v in views]))
    request = RoutingRequest(request_id="r", model="m", max_tokens=max_tokens)
    request.num_prompt_tokens = 1_000
    chosen = picker.pick(request, [CandidateScore(v.id, 0.0, {}) for v in views], cycle)
    return chosen.worker_id, cycle.read(REASON)


def test_a_worker_whose_kv_cache_would_overflow_is_passed_over() -> None:
    # "cheap" holds 80,000 of its 100,000 KV tokens, with 10 answers decoding whose mean
    # remaining output (the router's 40,000 in-flight output tokens over 10, half done) is
    # 2,000: a 1,000-token prompt with 3,000 output tokens would need 80,000 + 4,000 +
    # 10 x 2,000 = 104,000; "roomy" holds 20,000
    estimates = {"cheap": estimate(0.1, 0.02, 0.0001), "roomy": estimate(0.1, 0.02, 0.0009)}
    views = [_kv_view("cheap", 0.8, running=10, inflight=10, inflight_decode=40_000),
             _kv_view("roomy", 0.2)]
    chosen, (text, term) = _decide_with_views(estimates, views, max_tokens=3_000)
    assert chosen == "roomy" and term == "protect-kv"
    assert text.startswith("protect-kv: prefix 0.00 on roomy; ") and " on cheap; " in text
    # a short answer ends before the decodes there fill the cache: 80,000 + 1,100 + 10 x 100
    assert _decide_with_views(estimates, views, max_tokens=100)[0] == "cheap"
    # off by default: the cheaper worker, whatever its cache holds
    assert _decide_with_views(estimates, views, max_tokens=3_000, protect_kv=False)[0] == (
        "cheap")
    assert SloCostParams().protect_kv is False


def test_the_prefill_in_flight_counts_once_as_kv_held_not_as_output_to_decode() -> None:
    """The prompt tokens the router sent and the worker has not prefilled yet were also
    taken for output still to decode: the decodes' growth doubled and a worker with room was
    passed over."""
    estimates = {"cheap": estimate(0.1, 0.02, 0.0001), "roomy": estimate(0.1, 0.02, 0.0009)}
    # 60,000 held, 20,000 to prefill, 10 decodes with a mean 1,000 left (20,000 output over
    # 10, half done): 60,000 + 20,000 + 1,000 + 3,000 + 10 x 1,000 = 94,000 of 100,000
    fits = _kv_view("cheap", 0.6, running=10, inflight=10, inflight_decode=20_000,
                    inflight_prefill=20_000)
    chosen, (_, term) = _decide_with_views(estimates, [fits, _kv_view("roomy", 0.2)],
                                           max_tokens=3_000)
    assert (chosen, term) == ("cheap", "price")
    # 30,000 to prefill: 60,000 + 30,000 + 1,000 + 3,000 + 10 x 1,000 = 104,000
    overflows = _kv_view("cheap", 0.6, running=10, inflight=10, inflight_decode=20_000,
                         inflight_prefill=30_000)
    chosen, (_, term) = _decide_with_views(estimates, [overflows, _kv_view("roomy", 0.2)],
                                           max_tokens=3_000)
    assert (chosen, term) == ("roomy", "protect-kv")


def test_when_no_cache_has_room_the_request_goes_where_it_has_the_most() -> None:
    estimates = {"fast": estimate(0.1, 0.02, 0.0001), "slow": estimate(0.3, 0.04, 0.0001)}
    views = [_kv_view("fast", 0.99), _kv_view("slow", 0.97)]
    chosen, (_, term) = _decide_with_views(estimates, views, max_tokens=3_000)
    assert chosen == "slow" and term == "protect-kv"
    # late everywhere: the closest to the SLO among those with room
    late = {"fast": estimate(2.0, 0.02, 0.0001), "slow": estimate(3.0, 0.02, 0.0001),
            "third": estimate(4.0, 0.02, 0.0001)}
    views = [_kv_view("fast", 0.99), _kv_view("slow", 0.5), _kv_view("third", 0.1)]
    chosen, (_, term) = _decide_with_views(late, views, max_tokens=3_000)
    assert chosen == "slow" and term == "slo-fallback"


def _picker_with_a_short_answer_on(worker: str) -> SloCostPicker:
    """A picker that placed an 11-token answer (slack 0.3 s) on ``worker`` at t=0."""
    picker = SloCostPicker("slo-cost", SloCostParams(), ttft_s=0.5, tpot_s=0.05)
    cycle = CycleState()
    cycle.write(ESTIMATES_KEY, {worker: Estimate(0.1, 0.02, 1.0, 0.0001, 0, 0.1, 0.02, 0.1)})
    request = RoutingRequest(request_id="short", model="m", max_tokens=11, arrival_time=0.0)
    request.num_prompt_tokens = 100
    chosen = picker.pick(request, [CandidateScore(worker, 0.0, {})], cycle)
    picker.on_routed(request, Decision("short", chosen.worker_id, "m", "default", None, ""))
    return picker


def _pick_at(picker: SloCostPicker, estimates: dict[str, Estimate], now: float) -> str:
    cycle = CycleState()
    cycle.write(ESTIMATES_KEY, estimates)
    request = RoutingRequest(request_id=f"r{now}", model="m", max_tokens=100, arrival_time=now)
    request.num_prompt_tokens = 2_000
    return picker.pick(request, [CandidateScore(w, 0.0, {}) for w in estimates],
                       cycle).worker_id


def test_a_prefill_that_would_break_a_decoding_answer_goes_elsewhere() -> None:
    picker = _picker_with_a_short_answer_on("l40s")
    long_prefill = Estimate(0.4, 0.03, 1.0, 0.0004, 0, 0.4, 0.03, prefill_s=0.35)
    on_h100 = Estimate(0.15, 0.01, 1.0, 0.0009, 0, 0.15, 0.01, prefill_s=0.12)
    assert _pick_at(picker, {"l40s": long_prefill, "h100": on_h100}, now=0.15) == "h100"
    without_guard = SloCostPicker("slo-cost", SloCostParams(protect_decodes=False),
                                  ttft_s=0.5, tpot_s=0.05)
    assert _pick_at(without_guard, {"l40s": long_prefill, "h100": on_h100}, 0.15) == "l40s"


def test_when_every_worker_would_break_a_promise_the_slo_choice_stands() -> None:
    picker = _picker_with_a_short_answer_on("l40s")
    long_prefill = Estimate(0.4, 0.03, 1.0, 0.0004, 0, 0.4, 0.03, prefill_s=0.35)
    assert _pick_at(picker, {"l40s": long_prefill}, now=0.15) == "l40s"


def test_a_request_late_everywhere_goes_where_it_breaks_no_promise() -> None:
    picker = _picker_with_a_short_answer_on("h100")
    on_h100 = Estimate(1.0, 0.01, 1.0, 0.0009, 0, 1.0, 0.01, prefill_s=0.9)
    on_l40s = Estimate(2.0, 0.03, 1.0, 0.0004, 0, 2.0, 0.03, prefill_s=1.9)
    assert _pick_at(picker, {"h100": on_h100, "l40s": on_l40s}, now=0.15) == "l40s"


def test_completed_answers_release_their_worker() -> None:
    picker = _picker_with_a_short_answer_on("l40s")
    picker.on_completed(RoutingRequest(request_id="short", model="m"),
                        RequestOutcome(request_id="short", worker_id="l40s", status=200))
    long_prefill = Estimate(0.4, 0.03, 1.0, 0.0004, 0, 0.4, 0.03, prefill_s=0.35)
    on_h100 = Estimate(0.15, 0.01, 1.0, 0.0009, 0, 0.15, 0.01, prefill_s=0.12)
    assert _pick_at(picker, {"l40s": long_prefill, "h100": on_h100}, now=0.15) == "l40s"


def test_a_reloaded_picker_keeps_the_promises_of_the_one_it_replaces() -> None:
    old = _picker_with_a_short_answer_on("l40s")
    new = SloCostPicker("slo-cost", SloCostParams(), ttft_s=0.5, tpot_s=0.05)
    new.inherit_state(old)
    assert new.guard is old.guard and new.guard is not None
    assert new.guard.incumbents("l40s") == 1


def _two_gpu_engine(protect_decodes: bool) -> tuple[Any, list[WorkerView]]:
    """The default routing.yaml over an idle H100 and an idle L40S."""
    from types import MappingProxyType

    from policies.engine import PolicyEngine
    from policies.loader import parse_routing_text
    from workers.engine.profiles import BUILTIN_MODELS, H100_80GB, L40S_48GB
    from workers.fleet import FleetConfig, WorkerSpec
    from workers.models import WorkerInfo

    spec = BUILTIN_MODELS["llama-3.1-8b"]
    infos = [WorkerInfo(id=name, url="http://127.0.0.1:1", gpu=gpu, models=("m",),
                        model_spec=spec, price_per_hour=gpu.price_per_hour,
                        labels=MappingProxyType({}))
             for name, gpu in (("h100", H100_80GB), ("l40s", L40S_48GB))]
    fleet = FleetConfig(gpu_classes=MappingProxyType({}), models=MappingProxyType({"m": spec}),
                        workers=tuple(WorkerSpec(info) for info in infos))
    text = (REPO_ROOT / "config" / "routing.yaml").read_text()
    assert "protect_decodes: true" in text
    routing = parse_routing_text(text.replace(
        "protect_decodes: true", f"protect_decodes: {str(protect_decodes).lower()}"))
    views = [WorkerView(info=info, running=0, waiting=0, kv_usage=0.0, block_size=16,
                        num_gpu_blocks=20_000, max_model_len=131_072, inflight_requests=0,
                        inflight_tokens=0, healthy=True, staleness_s=0.0,
                        served_models=("m",)) for info in infos]
    return PolicyEngine.build(routing, fleet, seed=0), views


def _route(engine: Any, views: list[WorkerView], request_id: str, tokens: int,
           max_tokens: int, at: float, first_token: int = 0) -> Decision:
    prompt = list(range(first_token, first_token + tokens))
    request = RoutingRequest(request_id=request_id, model="m", path="/v1/completions",
                             prompt=prompt, max_tokens=max_tokens, arrival_time=at)
    request.prompt_token_ids = prompt
    request.num_prompt_tokens = tokens
    for producer in engine.producers:
        if producer.name != "tokens":
            producer.produce(request, views)
    decision: Decision = engine.decide(request, views)
    engine.on_routed(request, decision)
    return decision


def test_the_default_profile_moves_a_long_prompt_off_a_worker_finishing_a_short_answer() -> None:
    engine, views = _two_gpu_engine(protect_decodes=True)
    assert _route(engine, views, "short", 500, 11, at=0.0).worker_id == "l40s"
    moved = _route(engine, views, "long", 4_000, 200, at=0.1)
    assert moved.worker_id == "h100"
    assert moved.reason.startswith("protect-decodes: prefix 0.00 on h100; ")
    assert " on l40s; " in moved.reason
    assert moved.attributes["decided_by"] == "protect-decodes"
    # once the short answer has finished, the cheaper L40S takes such a prompt again
    engine.on_completed(RoutingRequest(request_id="short", model="m"),
                        RequestOutcome(request_id="short", worker_id="l40s", status=200))
    assert _route(engine, views, "again", 4_000, 200, at=0.12,
                  first_token=50_000).worker_id == "l40s"

    unguarded, views = _two_gpu_engine(protect_decodes=False)
    assert _route(unguarded, views, "short", 500, 11, at=0.0).worker_id == "l40s"
    assert _route(unguarded, views, "long", 4_000, 200, at=0.1).worker_id == "l40s"


@pytest.mark.parametrize("scorers", ["estimated-time", "cost", "estimated-time,cost"])
def test_the_chosen_workers_estimates_are_explained_whichever_estimate_scorers_run(
        scorers: str) -> None:
    """The picker records the estimates the profile's scorers did not (a profile with only
    the cost scorer still explains the TTFT and TPOT it chose by)."""
    from types import MappingProxyType

    from policies.engine import PolicyEngine
    from policies.loader import parse_routing_text
    from workers.engine.profiles import BUILTIN_MODELS, H100_80GB
    from workers.fleet import FleetConfig, WorkerSpec
    from workers.models import WorkerInfo

    spec = BUILTIN_MODELS["llama-3.1-8b"]
    info = WorkerInfo(id="h100", url="http://127.0.0.1:1", gpu=H100_80GB, models=("m",),
                      model_spec=spec, price_per_hour=H100_80GB.price_per_hour,
                      labels=MappingProxyType({}))
    fleet = FleetConfig(gpu_classes=MappingProxyType({}), models=MappingProxyType({"m": spec}),
                        workers=(WorkerSpec(info),))
    listed = "\n".join(f"      - type: {name}" for name in scorers.split(","))
    routing = parse_routing_text(
        "slo: {ttft_s: 0.5, tpot_s: 0.05}\nprofiles:\n  default:\n    scorers:\n"
        f"{listed}\n    picker: {{type: slo-cost}}\ndefault_profile: default\n")
    view = WorkerView(info=info, running=3, waiting=0, kv_usage=0.1, block_size=16,
                      num_gpu_blocks=20_000, max_model_len=131_072, inflight_requests=3,
                      inflight_tokens=0, healthy=True, staleness_s=0.0, served_models=("m",))
    engine = PolicyEngine.build(routing, fleet, seed=0)
    request = RoutingRequest(request_id="r", model="m", max_tokens=50)
    request.num_prompt_tokens = 1_000
    decision = engine.decide(request, [view])
    assert decision.worker_id == "h100"
    from policies.scorers.estimate_scorer import EstimateScorer

    scorer = engine.profiles["default"].scorers[0].scorer
    assert isinstance(scorer, EstimateScorer)
    estimate = scorer.estimator.estimate(request, view, cached=0)
    assert decision.attributes["estimated_cost_usd"] == pytest.approx(estimate.cost_usd)
    assert decision.attributes["estimated_ttft_s"] == pytest.approx(estimate.ttft_s)
    assert decision.attributes["estimated_tpot_s"] == pytest.approx(estimate.tpot_s)
