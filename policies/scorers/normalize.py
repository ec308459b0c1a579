"""Turning "lower is better" loads into scores in [0, 1], shared by the load scorers.

* ``relative`` (min-max across the candidates, as llm-d's queue scorer):
  ``score = (max - x) / (max - min)``; when every candidate has the same load, all score 1.
* ``absolute`` (against a fixed threshold, as llm-d's load-aware scorer):
  ``score = 1 - min(x, threshold) / threshold``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

Normalization = Literal["relative", "absolute"]


def inverse_min_max(loads: Mapping[str, float]) -> dict[str, float]:
    if not loads:
        return {}
    low, high = min(loads.values()), max(loads.values())
    if high <= low:
        return dict.fromkeys(loads, 1.0)
    span = high - low
    return {worker_id: (high - load) / span for worker_id, load in loads.items()}


def inverse_threshold(loads: Mapping[str, float], threshold: float) -> dict[str, float]:
    return {worker_id: 1.0 - min(max(load, 0.0), threshold) / threshold
            for worker_id, load in loads.items()}


def normalize(loads: Mapping[str, float], mode: Normalization,
              threshold: float) -> dict[str, float]:
    if mode == "relative":
        return inverse_min_max(loads)
    return inverse_threshold(loads, threshold)
