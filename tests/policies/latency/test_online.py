"""Online correction: per-worker factors once trained, per-GPU-class before."""

from __future__ import annotations

import itertools
import math

import pytest

from policies.latency.online import OnlineCorrection, Prediction, ttft_regime


def test_worker_factor_converges_to_observed_over_predicted() -> None:
    correction = OnlineCorrection(alpha=0.1, min_samples=5)
    for i in range(50):
        correction.remember(f"r{i}", Prediction("w1", "H100", ttft_s=0.5, tpot_s=0.02))
        correction.observe(f"r{i}", ttft_s=1.0, tpot_s=0.01)
    assert correction.factor("w1", "H100", "ttft") == pytest.approx(2.0)
    assert correction.factor("w1", "H100", "tpot") == pytest.approx(0.5)


def test_new_worker_borrows_its_gpu_class_and_others_stay_neutral() -> None:
    correction = OnlineCorrection(alpha=0.1, min_samples=5)
    for i in range(3):
        correction.remember(f"r{i}", Prediction("w1", "H100", ttft_s=1.0, tpot_s=0.02))
        correction.observe(f"r{i}", ttft_s=math.e, tpot_s=None)
    assert correction.samples("w1", "ttft") == 3 and correction.samples("w1", "tpot") == 0
    assert correction.factor("w2", "H100", "ttft") == pytest.approx(math.e)
    assert correction.factor("w3", "L40S", "ttft") == 1.0


def test_factors_are_clamped_and_unknown_requests_ignored() -> None:
    correction = OnlineCorrection(min_samples=1, max_factor=4.0)
    correction.remember("r", Prediction("w1", "A100", ttft_s=0.01, tpot_s=0.01))
    correction.observe("r", ttft_s=10.0, tpot_s=0.01)
    correction.observe("never-routed", ttft_s=1.0, tpot_s=1.0)
    assert correction.factor("w1", "A100", "ttft") == 4.0
    assert correction.factor("w1", "A100", "tpot") == pytest.approx(1.0)


def test_pending_predictions_are_bounded() -> None:
    correction = OnlineCorrection(max_pending=2)
    for i in range(3):
        correction.remember(f"r{i}", Prediction("w", "g", 1.0, 1.0))
    assert correction.forget("r0") is None and correction.forget("r2") is not None


def test_upper_tracks_the_ninetieth_percentile_of_the_ratio() -> None:
    correction = OnlineCorrection(min_samples=10, quantile=0.9, quantile_step=0.02)
    assert correction.upper("w1", "H100", "tpot") is None
    ratios = [1.0] * 9 + [3.0]          # nine requests as predicted, one three times slower
    for i in range(3000):
        correction.remember(f"r{i}", Prediction("w1", "H100", ttft_s=1.0, tpot_s=0.01))
        correction.observe(f"r{i}", ttft_s=None, tpot_s=0.01 * ratios[i % 10])
    upper = correction.upper("w1", "H100", "tpot")
    assert upper is not None and 1.0 <= upper <= 3.0
    borrowed = correction.upper("w9", "H100", "tpot")     # a new H100 uses its class's
    assert borrowed is not None and 1.0 <= borrowed <= 3.0
    assert correction.upper("w9", "L40S", "tpot") is None


def test_factors_equal_factor_and_upper_of_both_metrics() -> None:
    correction = OnlineCorrection(min_samples=3)
    assert correction.factors("w1", "h100") == (1.0, 1.0, None, None)
    for n in range(5):
        correction.remember(f"r{n}", Prediction("w1", "h100", 0.1, 0.02))
        correction.observe(f"r{n}", 0.1 * (1.5 + n / 10), 0.02 * 0.8)
    for worker_id, gpu_class in (("w1", "h100"), ("w2", "h100"), ("w3", "a100")):
        assert correction.factors(worker_id, gpu_class) == (
            correction.factor(worker_id, gpu_class, "ttft"),
            correction.factor(worker_id, gpu_class, "tpot"),
            correction.upper(worker_id, gpu_class, "ttft"),
            correction.upper(worker_id, gpu_class, "tpot"))
    assert correction.factors("w1", "h100")[2] is not None
    assert correction.factors("w3", "a100") == (1.0, 1.0, None, None)


def _computed(correction: OnlineCorrection, worker_id: str, gpu_class: str,
              regime: int | None = None) -> tuple[float, float, float | None, float | None]:
    return (correction.factor(worker_id, gpu_class, "ttft", regime),
            correction.factor(worker_id, gpu_class, "tpot", regime),
            correction.upper(worker_id, gpu_class, "ttft", regime),
            correction.upper(worker_id, gpu_class, "tpot", regime))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("regimes", [(None,), (None, 0, 1, 6, 7, 13)])
def test_kept_factors_equal_the_computed_ones_as_outcomes_arrive(
        seed: int, regimes: tuple[int | None, ...]) -> None:
    """``factors`` keeps each worker's four (per TTFT regime) until an outcome changes what
    they read: read between random observations (of a worker, of its class's other workers,
    in any regime, with a metric missing, of unknown requests), they equal ``factor`` and
    ``upper`` computed afresh."""
    import random

    rng = random.Random(seed)
    correction = OnlineCorrection(alpha=0.2, min_samples=4)
    workers = [("h0", "H100"), ("h1", "H100"), ("h2", "H100"), ("a0", "A100"), ("l0", "L40S")]
    kept_reads = 0
    for n in range(600):
        worker_id, gpu_class = rng.choice(workers)
        correction.remember(f"r{n}", Prediction(worker_id, gpu_class, 0.1, 0.02,
                                                rng.choice(regimes)))
        if rng.random() < 0.8:
            correction.observe(f"r{n}" if rng.random() < 0.95 else "unknown",
                               0.1 * rng.lognormvariate(0.2, 0.5) if rng.random() < 0.9
                               else None,
                               0.02 * rng.lognormvariate(-0.1, 0.3))
        for _ in range(rng.randint(0, 3)):
            worker_id, gpu_class = rng.choice([*workers, ("new", "H100"), ("x0", "B200")])
            regime = rng.choice(regimes)
            kept = correction._kept.get(worker_id)
            kept_reads += kept is not None and regime in kept[1]
            assert correction.factors(worker_id, gpu_class, regime) == _computed(
                correction, worker_id, gpu_class, regime)
    assert kept_reads > 100          # the kept factors were read, not only computed


def test_an_observation_renews_the_factors_of_the_workers_that_borrow_its_class() -> None:
    correction = OnlineCorrection(min_samples=3)
    for n in range(3):
        correction.remember(f"r{n}", Prediction("w1", "h100", 0.1, 0.02))
        correction.observe(f"r{n}", 0.2, 0.02)
    borrowed = correction.factors("w2", "h100")      # w2 has nothing of its own
    own = correction.factors("w1", "h100")
    correction.remember("later", Prediction("w1", "h100", 0.1, 0.02))
    correction.observe("later", 0.8, 0.02)
    assert correction.factors("w2", "h100") != borrowed     # the class's mean moved
    assert correction.factors("w1", "h100") != own
    assert correction.factors("w2", "h100") == _computed(correction, "w2", "h100")


def test_ttft_regime_buckets_uncached_tokens_by_four_and_marks_a_queue() -> None:
    assert [ttft_regime(n, 0) >> 1 for n in (1, 3, 4, 15, 16, 63, 64, 255, 256)] == [
        0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert ttft_regime(20_000, 0) == 2 * 7 and ttft_regime(20_000, 1) == 2 * 7 + 1
    assert ttft_regime(0, 0) == 0


def _teach(correction: OnlineCorrection, worker_id: str, gpu_class: str, regime: int | None,
           ttft_ratio: float, tpot_ratio: float, count: int, tag: str) -> None:
    for n in range(count):
        correction.remember(f"{tag}{n}", Prediction(worker_id, gpu_class, 0.1, 0.02, regime))
        correction.observe(f"{tag}{n}", 0.1 * ttft_ratio, 0.02 * tpot_ratio)


def test_ttft_is_corrected_per_regime_and_tpot_per_worker() -> None:
    """Short prefills three times late and long ones on time, on one worker: each regime
    gets its own TTFT factor (and 90th percentile); TPOT one factor whatever the regime."""
    correction = OnlineCorrection(alpha=0.1, min_samples=5)
    short, long = ttft_regime(100, 0), ttft_regime(20_000, 0)
    for _ in range(20):
        _teach(correction, "w1", "H100", short, 3.0, 1.0, 1, f"s{_}-")
        _teach(correction, "w1", "H100", long, 1.0, 0.5, 1, f"l{_}-")
    ttft_short, tpot_short, upper_short, _ = correction.factors("w1", "H100", short)
    ttft_long, tpot_long, upper_long, _ = correction.factors("w1", "H100", long)
    assert ttft_short == pytest.approx(3.0) and ttft_long == pytest.approx(1.0)
    assert upper_short is not None and upper_long is not None and upper_short > 2 * upper_long
    assert tpot_short == tpot_long == correction.factor("w1", "H100", "tpot")
    # a regime never seen reads the worker's factor over all regimes, between the two
    assert 1.0 < correction.factors("w1", "H100", ttft_regime(100, 5))[0] < 3.0
    assert correction.factors("w1", "H100")[0] == correction.factors(
        "w1", "H100", ttft_regime(100, 5))[0]


def test_a_regime_reads_the_worker_then_its_class_then_all_regimes() -> None:
    correction = OnlineCorrection(alpha=0.5, min_samples=3)
    short = ttft_regime(100, 1)
    _teach(correction, "w1", "H100", None, 1.0, 1.0, 10, "all")     # no regime: on time
    _teach(correction, "w2", "H100", short, 2.0, 1.0, 3, "w2-")     # w2: twice late
    # w1 has nothing of its own in that regime: its class's (learnt from w2) comes first
    assert correction.factor("w1", "H100", "ttft", short) == pytest.approx(2.0)
    _teach(correction, "w1", "H100", short, 4.0, 1.0, 3, "w1-")
    assert correction.factor("w1", "H100", "ttft", short) == pytest.approx(4.0)
    assert correction.factor("a1", "A100", "ttft", short) == 1.0    # another class: nothing


def test_regimes_off_learn_and_read_one_factor_per_worker() -> None:
    on, off = OnlineCorrection(min_samples=3), OnlineCorrection(min_samples=3,
                                                                ttft_regimes=False)
    for correction in (on, off):
        _teach(correction, "w1", "H100", ttft_regime(100, 0), 3.0, 1.0, 10, "s")
        _teach(correction, "w1", "H100", ttft_regime(20_000, 0), 1.0, 1.0, 10, "l")
    regime = ttft_regime(100, 0)
    assert off.factors("w1", "H100", regime) == off.factors("w1", "H100")
    assert on.factors("w1", "H100", regime)[0] > off.factors("w1", "H100", regime)[0]


def _observe(correction: OnlineCorrection, tag: str, worker_id: str, gpu_class: str,
             ttft_ratio: float | None, tpot_ratio: float | None,
             regime: int | None = None) -> None:
    correction.remember(tag, Prediction(worker_id, gpu_class, 0.1, 0.02, regime))
    correction.observe(tag, 0.1 * ttft_ratio if ttft_ratio is not None else None,
                       0.02 * tpot_ratio if tpot_ratio is not None else None)


def test_a_correction_that_predicts_worse_than_the_raw_model_can_be_put_out() -> None:
    """TPOT's raw prediction right on average, each request e^0.3 off either way in turn:
    a learnt mean only adds its own error, and with ``follow_judgement`` after
    ``min_samples`` comparisons TPOT is read uncorrected; TTFT, twice late every time, keeps
    its correction. The 90th percentile is learnt and read as before."""
    correction = OnlineCorrection(alpha=0.1, min_samples=10, follow_judgement=True)
    for n in range(60):
        _observe(correction, f"r{n}", "w1", "H100", 2.0, math.exp(0.3 if n % 2 else -0.3))
    raw, corrected, compared = correction.judgement("tpot")
    assert compared == 60 and corrected > raw == pytest.approx(0.3)
    assert not correction.correcting("tpot") and correction.correcting("ttft")
    assert correction.factor("w1", "H100", "tpot") == 1.0
    assert correction.factor("w1", "H100", "ttft") == pytest.approx(2.0)
    ttft, tpot, _, tpot_upper = correction.factors("w1", "H100")
    assert ttft == pytest.approx(2.0) and tpot == 1.0
    assert tpot_upper is not None and tpot_upper > 1.0       # the upper is unaffected
    # by default the same observations are judged alike, and the learnt TPOT mean stays in
    # force
    unjudged = OnlineCorrection(alpha=0.1, min_samples=10)
    for n in range(60):
        _observe(unjudged, f"r{n}", "w1", "H100", 2.0, math.exp(0.3 if n % 2 else -0.3))
    assert unjudged.judgement("tpot") == correction.judgement("tpot")
    assert unjudged.correcting("tpot") and unjudged.factor("w1", "H100", "tpot") != 1.0


def test_the_correction_is_judged_on_what_it_had_learnt_when_the_request_was_routed() -> None:
    """Each request is routed before the previous one finishes and is twice late: the
    correction as it stood at routing (learnt from the requests finished by then) is what
    is compared with the raw model, and it wins once it has learnt anything."""
    correction = OnlineCorrection(min_samples=5)
    correction.remember("r0", Prediction("w1", "H100", 0.1, 0.02))
    for n in range(1, 30):
        correction.remember(f"r{n}", Prediction("w1", "H100", 0.1, 0.02))
        correction.observe(f"r{n - 1}", 0.2, 0.02)
    raw, corrected, compared = correction.judgement("ttft")
    assert compared == 29 and raw == pytest.approx(math.log(2.0))
    # r0 and r1 were routed with nothing learnt (error ln 2 each), the rest with factor 2
    assert corrected == pytest.approx(2 * math.log(2.0) / 29)
    assert correction.correcting("ttft")


@pytest.mark.parametrize("seed", range(3))
def test_kept_factors_follow_the_judgement_as_it_turns(seed: int) -> None:
    """Phases where the correction helps (TPOT 1.5 x late) and where it hurts (right on
    average, off either way in turn): the judgement turns both ways, and the kept factors
    equal the computed ones throughout."""
    import random

    rng = random.Random(seed)
    correction = OnlineCorrection(alpha=0.2, min_samples=4, judge_window=20,
                                  follow_judgement=True)
    workers = [("h0", "H100"), ("h1", "H100"), ("a0", "A100")]
    states = []
    for n in range(800):
        helps = (n // 100) % 2 == 0
        worker_id, gpu_class = rng.choice(workers)
        ratio = 1.5 if helps else math.exp(0.4 if n % 2 else -0.4)
        _observe(correction, f"r{n}", worker_id, gpu_class, 1.0, ratio * rng.uniform(0.95, 1.05),
                 rng.choice((None, 2, 7)))
        states.append(correction.correcting("tpot"))
        for worker_id, gpu_class in rng.sample(workers, 2):
            regime = rng.choice((None, 2, 7))
            assert correction.factors(worker_id, gpu_class, regime) == _computed(
                correction, worker_id, gpu_class, regime)
    turns = sum(a != b for a, b in itertools.pairwise(states))
    assert turns >= 2 and True in states and False in states


def test_a_forgotten_worker_keeps_nothing_of_its_own_and_reads_its_class() -> None:
    """A worker id re-declared for another server kept the old server's factors (and ids
    churned through the fleet file stayed for ever)."""
    correction = OnlineCorrection(alpha=0.1, min_samples=2)
    for i in range(20):
        correction.remember(f"a{i}", Prediction("w1", "H100", ttft_s=0.5, tpot_s=0.02))
        correction.observe(f"a{i}", ttft_s=2.0, tpot_s=0.02)
        correction.remember(f"b{i}", Prediction("w2", "H100", ttft_s=0.5, tpot_s=0.02))
        correction.observe(f"b{i}", ttft_s=0.5, tpot_s=0.02)
    assert correction.factors("w1", "H100")[0] == pytest.approx(4.0)
    correction.remember("in-flight", Prediction("w1", "H100", ttft_s=0.5, tpot_s=0.02))
    correction.forget_worker("w1")
    correction.observe("in-flight", ttft_s=2.0, tpot_s=0.02)   # ends at the old server
    assert correction.samples("w1", "ttft") == 0
    assert correction.factors("w1", "H100") == correction.factors("w-new", "H100")
    assert correction.factors("w2", "H100")[0] == pytest.approx(1.0)
