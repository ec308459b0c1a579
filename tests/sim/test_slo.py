"""The SLO value object: its defaults are the recorded ones, an absolute TTFT target replaces
the relative rule, and a record is judged by the SLO it carries."""

from __future__ import annotations

import math

import pytest

from sim.metrics import RequestRecord, slo_ttft_target
from sim.slo import DEFAULT_SLO, Slo


def test_the_default_is_the_rule_every_recorded_run_used() -> None:
    assert (DEFAULT_SLO.ttft_s, DEFAULT_SLO.tpot_s, DEFAULT_SLO.attainment) == (None, 0.05, 0.9)
    assert DEFAULT_SLO.relative
    assert DEFAULT_SLO.ttft_target(0.1) == 0.5                        # the floor
    assert DEFAULT_SLO.ttft_target(1.0) == pytest.approx(3.0)         # 3 x idle-H100 prefill
    assert slo_ttft_target(1.0) == DEFAULT_SLO.ttft_target(1.0)
    assert DEFAULT_SLO.describe() == ("TTFT ≤ max(0.5 s, 3 × idle-H100 prefill) and "
                                      "TPOT ≤ 50 ms")
    assert DEFAULT_SLO.as_json() == {"ttft": "relative", "ttft_s": None, "ttft_floor_s": 0.5,
                                     "ttft_prefill_factor": 3.0, "tpot_s": 0.05,
                                     "attainment": 0.9}


def test_an_absolute_ttft_target_is_the_same_for_every_prompt() -> None:
    slo = Slo(ttft_s=2.0, tpot_s=0.1, attainment=0.95)
    assert not slo.relative
    assert slo.ttft_target(0.01) == slo.ttft_target(30.0) == 2.0
    assert slo_ttft_target(30.0, slo) == 2.0
    assert slo.describe() == "TTFT ≤ 2 s and TPOT ≤ 100 ms"
    assert slo.as_json()["ttft"] == "absolute" and slo.as_json()["ttft_floor_s"] is None


def test_a_record_is_judged_by_the_slo_it_carries() -> None:
    def record(slo: Slo) -> RequestRecord:
        return RequestRecord(index=0, arrival_s=0.0, prompt_tokens=100, output_tokens=10,
                             slo_ttft_s=slo.ttft_target(0.1), worker_id="w", ttft_s=0.8,
                             tpot_s=0.07, slo=slo)

    assert not record(DEFAULT_SLO).meets_slo                  # 0.8 s > 0.5 s, 70 ms > 50 ms
    assert not record(Slo(ttft_s=1.0)).meets_slo             # TTFT met, TPOT still 50 ms
    assert record(Slo(ttft_s=1.0, tpot_s=0.08)).meets_slo
    assert not record(Slo(ttft_s=0.5, tpot_s=0.08)).meets_slo
    rejected = RequestRecord(index=1, arrival_s=0.0, prompt_tokens=1, output_tokens=1,
                             slo_ttft_s=100.0, slo=Slo(ttft_s=100.0))
    assert not rejected.meets_slo


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"ttft_s": 0.0}, "ttft_s must be a finite number > 0"),
    ({"ttft_s": math.inf}, "ttft_s must be a finite number > 0"),
    ({"tpot_s": -1.0}, "tpot_s must be a finite number > 0"),
    ({"attainment": 0.0}, r"attainment must be in \(0, 1\]"),
    ({"attainment": 1.01}, r"attainment must be in \(0, 1\]"),
])
def test_impossible_slos_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Slo(**kwargs)
