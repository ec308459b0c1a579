"""Online correction: per-worker factors once trained, per-GPU-class before."""

from __future__ import annotations

import math

import pytest

from policies.latency.online import OnlineCorrection, Prediction


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


def _computed(correction: OnlineCorrection, worker_id: str,
              gpu_class: str) -> tuple[float, float, float | None, float | None]:
    return (correction.factor(worker_id, gpu_class, "ttft"),
            correction.factor(worker_id, gpu_class, "tpot"),
            correction.upper(worker_id, gpu_class, "ttft"),
            correction.upper(worker_id, gpu_class, "tpot"))


@pytest.mark.parametrize("seed", range(5))
def test_kept_factors_equal_the_computed_ones_as_outcomes_arrive(seed: int) -> None:
    """``factors`` keeps each worker's four until an outcome changes what they read: read
    between random observations (of a worker, of its class's other workers, with a metric
    missing, of unknown requests), they equal ``factor`` and ``upper`` computed afresh."""
    import random

    rng = random.Random(seed)
    correction = OnlineCorrection(alpha=0.2, min_samples=4)
    workers = [("h0", "H100"), ("h1", "H100"), ("h2", "H100"), ("a0", "A100"), ("l0", "L40S")]
    kept_reads = 0
    for n in range(600):
        worker_id, gpu_class = rng.choice(workers)
        correction.remember(f"r{n}", Prediction(worker_id, gpu_class, 0.1, 0.02))
        if rng.random() < 0.8:
            correction.observe(f"r{n}" if rng.random() < 0.95 else "unknown",
                               0.1 * rng.lognormvariate(0.2, 0.5) if rng.random() < 0.9
                               else None,
                               0.02 * rng.lognormvariate(-0.1, 0.3))
        for _ in range(rng.randint(0, 3)):
            worker_id, gpu_class = rng.choice([*workers, ("new", "H100"), ("x0", "B200")])
            kept_reads += worker_id in correction._kept
            assert correction.factors(worker_id, gpu_class) == _computed(
                correction, worker_id, gpu_class)
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
