"""Repeated replay rounds: each target's spread over the rounds, and hit-rate ratios.

One live replay of a slice settles little: the workers' prefix-cache hit rate of one router
moves by about a point between two runs of the same code on a small machine, because which
blocks the bounded caches still hold depends on timing. ``kvroute bench replay --repeat N``
runs every target N times, round after round (A B A B), and this module reads the rounds:

* ``spreads``: per target, the mean, lowest and highest hit rate and SLO attainment;
* ``hit_ratios``: the first target's hit rate over each other target's, within each round
  (the two ran minutes apart, on the same machine state), with their mean and range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean

from bench.replay import ReplayResult


@dataclass(frozen=True, slots=True)
class Spread:
    """Mean, lowest and highest of one measure over the rounds that produced it."""

    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        return cls(fmean(values), min(values), max(values)) if values else None


@dataclass(frozen=True, slots=True)
class TargetSpread:
    name: str
    runs: int                      # rounds that ran (not skipped)
    hit_rate: Spread | None
    slo_attainment: Spread | None


@dataclass(frozen=True, slots=True)
class HitRatio:
    """``baseline``'s hit rate over ``other``'s, per round (None where either is missing)."""

    baseline: str
    other: str
    per_round: tuple[float | None, ...]
    spread: Spread | None


def rounds(results: Sequence[ReplayResult]) -> int:
    return max((r.round for r in results), default=0)


def spreads(results: Sequence[ReplayResult]) -> list[TargetSpread]:
    """Per target, in first-seen order, its spread over the rounds that ran."""
    by_name: dict[str, list[ReplayResult]] = {}
    for result in results:
        by_name.setdefault(result.name, []).append(result)
    summary = []
    for name, runs in by_name.items():
        ran = [r for r in runs if r.skipped is None]
        summary.append(TargetSpread(
            name, len(ran),
            Spread.of([r.prefix_hit_rate for r in ran if r.prefix_hit_rate is not None]),
            Spread.of([r.slo_attainment for r in ran if r.slo_attainment is not None])))
    return summary


def hit_ratios(results: Sequence[ReplayResult]) -> list[HitRatio]:
    """The first target's hit rate over each other target's, round by round."""
    names = list(dict.fromkeys(r.name for r in results))
    if len(names) < 2:
        return []
    rate = {(r.name, r.round): r.prefix_hit_rate for r in results if r.skipped is None}
    baseline, count = names[0], rounds(results)
    ratios = []
    for other in names[1:]:
        per_round: list[float | None] = []
        for number in range(1, count + 1):
            mine, theirs = rate.get((baseline, number)), rate.get((other, number))
            per_round.append(mine / theirs if mine is not None and theirs else None)
        ratios.append(HitRatio(baseline, other, tuple(per_round),
                               Spread.of([v for v in per_round if v is not None])))
    return ratios


def _spread_text(spread: Spread | None, digits: int = 3) -> str:
    if spread is None:
        return "–"
    return f"{spread.mean:.{digits}f} ({spread.low:.{digits}f}–{spread.high:.{digits}f})"


def markdown_rounds(results: Sequence[ReplayResult]) -> str:
    """The spread table and the ratio table ('' for a single round)."""
    count = rounds(results)
    if count < 2:
        return ""
    lines = [f"Over {count} rounds: mean (lowest–highest)", "",
             "| Router | rounds run | worker prefix-cache hit rate | SLO attainment |",
             "|---|---|---|---|"]
    for target in spreads(results):
        lines.append(f"| {target.name} | {target.runs} | {_spread_text(target.hit_rate)} "
                     f"| {_spread_text(target.slo_attainment)} |")
    ratios = hit_ratios(results)
    if ratios:
        lines += ["", "| Hit rate ratio | per round | mean (lowest–highest) |", "|---|---|---|"]
        for ratio in ratios:
            per_round = ", ".join("–" if v is None else f"{v:.2f}" for v in ratio.per_round)
            lines.append(f"| {ratio.baseline} / {ratio.other} | {per_round} "
                         f"| {_spread_text(ratio.spread, 2)} |")
    return "\n".join(lines) + "\n"
