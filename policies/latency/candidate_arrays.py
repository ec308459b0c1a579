"""The candidates' per-worker constants as arrays, kept across decisions while they repeat.

A decision at a thousand workers must not walk every view in Python more than it has to.
What is fixed per worker (its id, step-model coefficients and price) is gathered once into
``CandidateArrays`` and reused for as long as the decision's views carry the same
``WorkerInfo`` objects in the same order (a C-level list comparison by identity); what
changes per decision (queued prefill, running requests, cached tokens) is read into numpy
arrays, and the shortlist is ranked there with stable sorts (ties to the earlier view, as
``heapq.nsmallest`` breaks them).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from policies.latency.step_model import StepCoefficients
from workers.models import WorkerInfo, WorkerView

_info = attrgetter("info")
_queued = attrgetter("inflight_prefill_tokens")
_running = attrgetter("running")


class CandidateArrays:
    """Per-worker constants of one candidate list, in view order."""

    __slots__ = ("coefficients", "distinct", "floor_s", "ids", "infos", "per_token_s",
                 "position", "price")

    def __init__(self, infos: list[WorkerInfo],
                 coefficients: Callable[[WorkerInfo], StepCoefficients]) -> None:
        self.infos = infos
        self.ids = [info.id for info in infos]
        self.coefficients = [coefficients(info) for info in infos]
        self.distinct = dict(zip(map(id, self.coefficients), self.coefficients, strict=True))
        self.per_token_s = np.array([k.per_token_s for k in self.coefficients], dtype=float)
        self.floor_s = np.array([k.floor_s for k in self.coefficients], dtype=float)
        self.price = np.array([info.price_per_hour for info in infos], dtype=float)
        self.position = dict(zip(self.ids, range(len(self.ids)), strict=True))

    def matches(self, infos: list[WorkerInfo]) -> bool:
        return infos == self.infos


def infos_of(views: Sequence[WorkerView]) -> list[WorkerInfo]:
    return list(map(_info, views))


def shortlist_positions(arrays: CandidateArrays, views: Sequence[WorkerView], prompt: int,
                        cached: Mapping[str, int], soonest: int, cheapest: int,
                        most_cached: int) -> list[int]:
    """Positions (ascending) of the ``soonest`` workers by the bound
    ``per_token · (queued prefill + prompt − cached) + floor · (1 + running / 32)``, the
    ``cheapest`` by bound × price and the ``most_cached``."""
    count = len(views)
    queued = np.fromiter(map(_queued, views), dtype=float, count=count)
    running = np.fromiter(map(_running, views), dtype=float, count=count)
    uncached = queued + prompt
    position = arrays.position
    if cached:
        cached_tokens: npt.NDArray[np.float64] = np.zeros(count)
        for worker_id, tokens in cached.items():
            at = position.get(worker_id)
            if at is not None:
                cached_tokens[at] = tokens
        uncached = uncached - cached_tokens
    bound = arrays.per_token_s * uncached + arrays.floor_s * (1 + running / 32)
    picked = set(np.argsort(bound, kind="stable")[:soonest].tolist())
    picked.update(np.argsort(bound * arrays.price, kind="stable")[:cheapest].tolist())
    picked.update(position[w] for w in heapq.nlargest(most_cached, cached,
                                                      key=cached.__getitem__)
                  if w in position)
    return sorted(picked)
