"""Turning "lower is better" loads into scores in [0, 1], shared by the load scorers.

* ``relative`` (min-max across the candidates, as llm-d's queue scorer):
  ``score = (max - x) / (max - min)``; when every candidate has the same load, all score 1.
* ``absolute`` (against a fixed threshold, as llm-d's load-aware scorer):
  ``score = 1 - min(x, threshold) / threshold``.

Each works on a list of loads in view order (``normalize_column``), for the scorers'
``score_column``.
"""

from __future__ import annotations

from itertools import repeat
from operator import sub, truediv
from typing import Literal

Normalization = Literal["relative", "absolute"]


def inverse_min_max_column(loads: list[float]) -> list[float]:
    if not loads:
        return []
    low, high = min(loads), max(loads)
    if high <= low:
        return [1.0] * len(loads)
    # (high - load) / span for each load, computed in C
    return list(map(truediv, map(sub, repeat(high), loads), repeat(high - low)))


def inverse_threshold_column(loads: list[float], threshold: float) -> list[float]:
    return [1.0 - min(max(load, 0.0), threshold) / threshold for load in loads]


def normalize_column(loads: list[float], mode: Normalization, threshold: float) -> list[float]:
    if mode == "relative":
        return inverse_min_max_column(loads)
    return inverse_threshold_column(loads, threshold)

