"""What summary.md says about each goodput search: absolute rates, and why a 0.0 is 0.0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sim.goodput_report import bar_label, floor_note, fraction_of_rate, goodput_lines
from sim.report import write_plots

PLATEAU: dict[str, Any] = {
    "rate_scale": 1.0, "goodput_rate_scale": 0.0, "goodput_capped": False,
    "goodput_probes": [[1.0, 0.017], [0.5, 0.13], [0.25, 0.34], [0.125, 0.383],
                       [0.0625, 0.393], [0.03125, 0.393]],
    "goodput_floor": "plateau", "idle_attainment": 0.393, "goodput_rps": 0.0,
    "goodput_prompt_tok_s": 0.0, "slo_attainment": 0.017}
LIMIT: dict[str, Any] = {
    **PLATEAU, "goodput_probes": [[1.0 / 2 ** i, 0.6 + 0.03 * i] for i in range(7)],
    "goodput_floor": "limit", "idle_attainment": 0.78}
PASSED: dict[str, Any] = {
    "rate_scale": 1.0, "goodput_rate_scale": 1.75, "goodput_capped": False,
    "goodput_probes": [[1.0, 0.95], [2.0, 0.5]], "goodput_floor": None,
    "idle_attainment": None, "goodput_rps": 2.422, "goodput_prompt_tok_s": 5064.4,
    "slo_attainment": 0.95}


def test_a_plateau_says_the_slo_is_not_met_even_at_the_smallest_rate() -> None:
    assert fraction_of_rate(PLATEAU) == "1/32"
    note = floor_note("round-robin", PLATEAU)
    assert note is not None
    assert note.startswith("round-robin: the SLO is not met even at 1/32 of the rate "
                           "(attainment 39 % at ×0.0312, 90 % needed)")
    assert "cannot serve these requests within the SLO" in note


def test_a_plateau_that_never_rose_does_not_claim_the_fleet_was_idle() -> None:
    flat = {**PLATEAU, "goodput_probes": [[1.0, 0.0], [0.5, 0.0]], "idle_attainment": 0.0}
    note = floor_note("prefix", flat)
    assert note is not None and "still overloaded at 1/2 of the rate" in note
    assert "cannot serve" not in note


def test_a_limit_says_the_goodput_is_below_the_smallest_scale_not_none() -> None:
    note = floor_note("l40s", LIMIT)
    assert note is not None
    assert "still rising" in note and "below ×0.0156" in note and "1/64" in note
    assert floor_note("kvroute", PASSED) is None


def test_the_lines_under_the_table_give_absolute_rates_and_the_notes() -> None:
    text = goodput_lines({"kvroute": PASSED, "round-robin": PLATEAU}, offered_rps=2.768,
                         rate_scale=2.0, target=0.9)
    assert "(1.38 req/s at scale 1)" in text             # 2.768 offered at x2.0
    assert "* kvroute: ×1.75 = 2.42 req/s, 5,064 prompt tok/s" in text
    assert "* round-robin: the SLO is not met even at 1/32 of the rate" in text
    capped = {**PASSED, "goodput_capped": True}
    assert "≥ 2.42 req/s" in goodput_lines({"k": capped}, 1.0, 1.0)
    assert goodput_lines({"k": {"goodput_rate_scale": None}}, 1.0, 1.0) == ""


def test_the_goodput_plot_labels_a_zero_bar_instead_of_an_empty_axis(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entries = {"round-robin": PLATEAU, "l40s": LIMIT}
    assert bar_label(PASSED) is None
    plateau_label, limit_label = bar_label(PLATEAU), bar_label(LIMIT)
    assert plateau_label is not None and "SLO not met" in plateau_label
    assert limit_label is not None and limit_label.startswith("< ×0.0156")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown: list[tuple[str, tuple[float, float]]] = []
    real_savefig = plt.Figure.savefig

    def spy(fig: Any, path: Any, **kwargs: Any) -> None:
        if str(path).endswith("goodput.png"):
            ax = fig.axes[0]
            shown.extend((t.get_text(), ax.get_ylim()) for t in ax.texts)
        real_savefig(fig, path, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", spy)
    write_plots(tmp_path, entries, {})
    assert [text for text, _ in shown] == [plateau_label, limit_label]
    assert all(limits == (0.0, 1.0) for _, limits in shown)     # not matplotlib's ±0.04
