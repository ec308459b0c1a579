"""Per-worker TTFT / TPOT / cost estimates from the fleet state."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from policies.base import RoutingRequest
from policies.latency.estimator import Estimate, PrefillArrivals, TimeEstimator
from policies.latency.online import Prediction
from policies.latency.step_model import coefficients_for_worker
from tests.policies.conftest import make_view
from workers.engine.profiles import A100_80GB, H100_80GB, L40S_48GB


def request_of(tokens: int, output: int = 100, at: float = 0.0) -> RoutingRequest:
    request = RoutingRequest(request_id=f"r{tokens}", model="m", max_tokens=output,
                             arrival_time=at)
    request.num_prompt_tokens = tokens
    return request


def estimator() -> TimeEstimator:
    return TimeEstimator(coefficients_for_worker)


def test_idle_h100_prefills_a_long_prompt_faster_than_an_l40s() -> None:
    est = estimator()
    request = request_of(16_000)
    h100 = est.estimate(request, make_view("h", gpu=H100_80GB), cached=0)
    l40s = est.estimate(request, make_view("l", gpu=L40S_48GB), cached=0)
    assert l40s.ttft_s > 2.5 * h100.ttft_s
    k = est.coefficients(make_view("h").info)
    assert h100.ttft_s == pytest.approx(k.prefill_s(16_000))


def test_queued_prefill_and_running_decodes_delay_the_first_token() -> None:
    est = estimator()
    request = request_of(2_000)
    idle = est.estimate(request, make_view("a", gpu=A100_80GB), cached=0)
    queued = est.estimate(request, make_view("a", gpu=A100_80GB,
                                             inflight_prefill_tokens=8_000), cached=0)
    decoding = est.estimate(request, make_view("a", gpu=A100_80GB, running=100,
                                               kv_usage=0.2), cached=0)
    assert queued.ttft_s > 4 * idle.ttft_s
    assert decoding.ttft_s > idle.ttft_s and decoding.tpot_s > idle.tpot_s


def test_cached_prefix_cuts_ttft_and_cost() -> None:
    est = estimator()
    request = request_of(8_000)
    cold = est.estimate(request, make_view("h"), cached=0)
    warm = est.estimate(request, make_view("h"), cached=7_680)
    assert warm.ttft_s < cold.ttft_s / 4 and warm.cost_usd < cold.cost_usd
    assert warm.cached_tokens == 7_680
    assert est.estimate(request, make_view("h"), cached=9_000).cached_tokens == 7_999


def test_the_hardware_prefill_ignores_what_a_worker_has_cached() -> None:
    est = estimator()
    request = request_of(8_000)
    busy_warm = est.estimate(request, make_view("h", running=30, kv_usage=0.4), cached=4_096)
    cold = est.estimate(request, make_view("h"), cached=0)
    k = est.coefficients(make_view("h").info)
    assert busy_warm.full_prefill_s == cold.full_prefill_s == k.prefill_s(8_000, 0)
    assert busy_warm.prefill_s < cold.prefill_s
    l40s = est.estimate(request, make_view("l", gpu=L40S_48GB), cached=4_096)
    assert l40s.full_prefill_s is not None and l40s.full_prefill_s > 2.5 * k.prefill_s(8_000)


def test_max_tokens_beyond_the_window_is_estimated_as_the_worker_clamps_it() -> None:
    est = estimator()
    busy: dict[str, Any] = {"running": 8, "inflight_requests": 8, "kv_usage": 0.3}
    huge = est.estimate(request_of(2_000, output=10_000_000), make_view("h", **busy), cached=0)
    clamped = est.estimate(request_of(2_000, output=8_192 - 2_000), make_view("h", **busy),
                           cached=0)
    assert huge == clamped                          # the view's window is 8,192 tokens
    unknown = est.estimate(request_of(2_000, output=10_000_000),
                           make_view("h", max_model_len=0, **busy), cached=0)
    assert unknown.gpu_s > 100 * clamped.gpu_s     # an unknown window clamps nothing


def test_cost_is_price_times_gpu_seconds_and_a_shared_batch_is_cheaper() -> None:
    est = estimator()
    request = request_of(500, output=300)
    alone = est.estimate(request, make_view("h"), cached=0)
    assert alone.cost_usd == pytest.approx(3.00 / 3600 * alone.gpu_s)
    shared = est.estimate(request, make_view("h", running=31, inflight_requests=31,
                                             kv_usage=0.05), cached=0)
    assert shared.cost_usd < alone.cost_usd / 5


def test_routed_prefill_dilutes_the_tpot_it_predicts() -> None:
    est = estimator()
    view = make_view("a", gpu=A100_80GB)
    quiet = est.estimate(request_of(100, at=10.0), view, cached=0)
    for i in range(20):
        est.arrivals.add("a", 4_000, now=float(i) * 0.5)
    busy = est.estimate(request_of(100, at=10.0), view, cached=0)
    assert busy.tpot_s > 1.3 * quiet.tpot_s


def test_arrival_rate_decays_at_the_time_constant_nearest_the_horizon() -> None:
    arrivals = PrefillArrivals(taus_s=(1.0, 10.0))
    arrivals.add("w", 1000, now=0.0)
    assert arrivals.rate("w", 0.0) == pytest.approx(100.0)
    assert arrivals.rate("w", 10.0) == pytest.approx(100.0 / 2.718281828, rel=1e-6)
    assert arrivals.rate("w", 0.0, horizon_s=0.8) == pytest.approx(1000.0)
    assert arrivals.rate("w", 1.0, horizon_s=0.8) == pytest.approx(1000.0 / 2.718281828)
    assert arrivals.rate("other", 0.0) == 0.0


def test_large_fleets_are_estimated_on_a_shortlist_that_keeps_the_cached_worker() -> None:
    from policies.base import CycleState
    from policies.latency.estimator import SHORTLIST, estimates_for
    from policies.prefix.matching import MATCH_KEY, PrefixMatch

    est = estimator()
    views = [make_view(f"w{i}", inflight_prefill_tokens=1_000 * (i % 50)) for i in range(200)]
    cycle = CycleState()
    cycle.write(MATCH_KEY, PrefixMatch(tokens={"w199": 4_000}, exact=frozenset()))
    known = estimates_for(cycle, request_of(5_000), views, est)
    assert len(known) <= SHORTLIST
    assert "w199" in known and "w0" in known          # cached prefix, and an idle worker
    assert known["w199"].cached_tokens == 4_000
    assert estimates_for(cycle, request_of(5_000), views, est) is known


def test_new_estimate_builds_the_same_estimate_as_its_constructor() -> None:
    from policies.latency.estimator import Estimate, new_estimate

    values = (0.3, 0.02, 1.5, 0.0004, 512, 0.25, 0.018, 0.1, None, 0.03, 2, 0.12, 9)
    built = new_estimate(*values)
    assert built == Estimate(*values)
    assert built.ttft_upper_s is None and built.tpot_upper_s == 0.03
    assert built.prefill_steps == 2 and built.full_prefill_s == 0.12 and built.ttft_regime == 9
    with pytest.raises(AttributeError):
        built.ttft_s = 1.0  # type: ignore[misc]


def test_view_terms_kept_between_decisions_give_the_estimates_of_a_fresh_estimator() -> None:
    """The view-only terms are reused while a worker's view repeats and recomputed when any
    field they read changes: every estimate equals a fresh estimator's to the last bit."""
    import dataclasses
    import random

    rng = random.Random(7)
    views = [make_view(f"w{i}", gpu=gpu) for i, gpu in
             enumerate((H100_80GB, A100_80GB, L40S_48GB, L40S_48GB))]
    kept = estimator()
    for n in range(300):
        position = rng.randrange(len(views))
        field, value = rng.choice((
            ("running", rng.choice((0, 0, 3, 40, 300))),
            ("waiting", rng.randint(0, 400)),
            ("inflight_requests", rng.randint(0, 600)),
            ("kv_usage", rng.choice((0.0, rng.random()))),
            ("num_gpu_blocks", rng.choice((1000, 29_000))),
            ("block_size", rng.choice((16, 32))),
            ("inflight_prefill_tokens", rng.randint(0, 30_000)),
        ))
        changes: dict[str, Any] = {field: value}
        views[position] = dataclasses.replace(views[position], **changes)
        request = request_of(rng.randint(1, 20_000), output=rng.randint(1, 900), at=n * 0.05)
        cached = {views[0].id: rng.randrange(request.num_prompt_tokens)}
        fresh = TimeEstimator(coefficients_for_worker, arrivals=kept.arrivals)
        mine: dict[str, Estimate] = {}
        kept.estimate_into(mine, request, views, kept.candidate_arrays(views).constants, cached)
        theirs: dict[str, Estimate] = {}
        fresh.estimate_into(theirs, request, views, fresh.candidate_arrays(views).constants,
                            cached)
        assert mine == theirs, (n, field, value)
        kept.arrivals.add(rng.choice(("w1", "w3")), rng.randint(0, 4000), n * 0.05)


def test_a_worker_full_at_its_own_max_num_seqs_makes_a_request_wait_for_a_slot() -> None:
    est = estimator()
    request = request_of(200)
    default = make_view("d", running=8, kv_usage=0.1)
    small = dataclasses.replace(default, info=dataclasses.replace(
        default.info, id="s", max_num_seqs=8))
    roomy = dataclasses.replace(small, running=7)
    assert est.coefficients(small.info).max_num_seqs == 8
    assert est.coefficients(default.info).max_num_seqs == H100_80GB.default_max_num_seqs
    full, free = (est.estimate(request, view, cached=0) for view in (small, roomy))
    unbounded = est.estimate(request, default, cached=0)
    # 8 running on an 8-sequence engine: the request waits for one of them to end
    assert full.ttft_s > 10 * unbounded.ttft_s
    assert free.ttft_s < 2 * unbounded.ttft_s


def test_each_estimate_reads_and_teaches_ttft_in_its_regime() -> None:
    """The estimate carries the request's regime on that worker (its uncached tokens, a
    queue ahead or not); TTFT is corrected by what was learnt in that regime, and routing
    and an outcome teach the correction in the regime the estimate was made in."""
    from policies.latency.online import ttft_regime

    est = estimator()
    idle, queued = make_view("a"), make_view("a", inflight_prefill_tokens=4_000)
    request = request_of(8_000)
    cold = est.estimate(request, idle, cached=0)
    warm = est.estimate(request, idle, cached=7_936)
    behind = est.estimate(request, queued, cached=0)
    assert cold.ttft_regime == ttft_regime(8_000, 0)
    assert warm.ttft_regime == ttft_regime(64, 0) != cold.ttft_regime
    assert behind.ttft_regime == ttft_regime(8_000, 4_000) == cold.ttft_regime + 1
    for n in range(30):         # requests with little to prefill come in three times late
        routed = request_of(8_000)
        routed.request_id = f"warm{n}"
        estimate = est.estimate(routed, idle, cached=7_936)
        est.on_routed(routed, "a", idle.gpu.name, estimate)
        est.observe(routed.request_id, 3 * estimate.raw_ttft_s, estimate.raw_tpot_s)
    corrected_warm = est.estimate(request, idle, cached=7_936)
    assert corrected_warm.ttft_s == pytest.approx(3 * corrected_warm.raw_ttft_s)
    corrected_cold = est.estimate(request, idle, cached=0)   # a regime with nothing of its own
    assert corrected_cold.ttft_s < 3 * corrected_cold.raw_ttft_s


def test_a_worker_declared_anew_on_other_hardware_is_estimated_as_that_hardware() -> None:
    """A reloaded fleet file may give a worker id another GPU: its coefficients follow."""
    est = estimator()
    request = request_of(16_000)
    on_h100 = est.estimate(request, make_view("w", gpu=H100_80GB), cached=0)
    on_l40s = est.estimate(request, make_view("w", gpu=L40S_48GB), cached=0)
    fresh = estimator().estimate(request, make_view("w", gpu=L40S_48GB), cached=0)
    assert on_l40s.ttft_s == fresh.ttft_s > 2.5 * on_h100.ttft_s


def test_each_sequence_of_a_request_costs_its_decode() -> None:
    """16 choices were priced as one: the tenants' cost counted a sixteenth of their
    decoding."""
    est = estimator()
    one = est.estimate(request_of(1_000, output=200), make_view("w"), cached=0)
    many = request_of(1_000, output=200)
    many.choices = 16
    sixteen = est.estimate(many, make_view("w"), cached=0)
    assert sixteen.cost_usd > 5 * one.cost_usd       # the prompt is prefilled once
    assert (sixteen.ttft_s, sixteen.tpot_s) == (one.ttft_s, one.tpot_s)


def test_the_served_answer_is_costed_at_its_own_length() -> None:
    """The same prompt answered in 40 tokens costs the same whether it asked for 40 or for
    ten million (its estimate priced the window's rest); without an estimate, unchanged."""
    from policies.latency.estimator import served_cost_usd

    est = estimator()
    busy: dict[str, Any] = {"running": 8, "inflight_requests": 8, "kv_usage": 0.3}
    asked_40 = est.estimate(request_of(2_000, output=40), make_view("h", **busy), cached=0)
    asked_more = est.estimate(request_of(2_000, output=10_000_000), make_view("h", **busy),
                              cached=0)
    assert asked_more.cost_usd > 50 * asked_40.cost_usd
    assert asked_more.output_tokens == 8_192 - 2_000
    assert served_cost_usd(asked_more.cost_usd, asked_more, 40) == pytest.approx(
        asked_40.cost_usd)
    assert served_cost_usd(asked_40.cost_usd, asked_40, 40) == pytest.approx(asked_40.cost_usd)
    prefill_only = served_cost_usd(asked_40.cost_usd, asked_40, 0)
    assert 0 < prefill_only < asked_40.cost_usd
    assert served_cost_usd(0.5, None, 40) == 0.5


def test_a_forgotten_worker_keeps_no_routed_prefill_nor_correction() -> None:
    est = estimator()
    est.arrivals.add("h", 5_000, 0.0)
    est.correction.remember("r", Prediction("h", "H100", ttft_s=0.5, tpot_s=0.02))
    est.correction.observe("r", ttft_s=1.0, tpot_s=0.02)
    assert est.arrivals.rate("h", 0.0) > 0 and est.correction.samples("h", "ttft") == 1
    est.forget("h")
    assert est.arrivals.rate("h", 0.0) == 0.0 and est.correction.samples("h", "ttft") == 0
