"""The candidates' per-worker constants as arrays, kept across decisions while they repeat.

A decision at a thousand workers must not walk every view in Python more than it has to.
What is fixed per worker (its id, step-model coefficients and price, and the tuple of
constants the estimator unpacks per worker) is gathered once into ``CandidateArrays`` and
reused for as long as the decision's views carry the same ``WorkerInfo`` objects in the same
order (the profile's ``CandidateIndex``); what changes per decision (queued prefill, running
requests, cached tokens) is read into numpy arrays, and the shortlist takes the smallest
bounds there by a partition, ties to the earlier view (the head of a stable argsort).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from policies.candidate_index import CandidateIndex
from policies.latency.step_model import StepCoefficients
from workers.models import WorkerInfo, WorkerView

_info = attrgetter("info")
_queued = attrgetter("inflight_prefill_tokens")
_running = attrgetter("running")


WorkerConstants = tuple[str, str, float, StepCoefficients, int, float, float, float, float,
                        float, float, int, int, int]
"""(id, GPU class, price per second, coefficients, id() of the coefficients, fixed_s,
floor_s − fixed_s, per_token_s, per_pair_s, per_ctx_token_s, per_seq_s, max_batched_tokens,
max_batched_tokens − 1, max_num_seqs): what ``TimeEstimator`` reads of a worker per
estimate, unpacked in one step."""


def worker_constants(info: WorkerInfo, k: StepCoefficients) -> WorkerConstants:
    return (info.id, info.gpu.name, info.price_per_hour / 3600.0, k, id(k), k.fixed_s,
            k.floor_s - k.fixed_s, k.per_token_s, k.per_pair_s, k.per_ctx_token_s,
            k.per_seq_s, k.max_batched_tokens, k.max_batched_tokens - 1, k.max_num_seqs)


class CandidateArrays:
    """Per-worker constants of one candidate list, in view order."""

    __slots__ = ("coefficients", "constants", "distinct", "floor_s", "ids", "index", "infos",
                 "per_token_s", "position", "price")

    def __init__(self, index: CandidateIndex,
                 coefficients: Callable[[WorkerInfo], StepCoefficients]) -> None:
        self.index = index
        self.infos = index.infos
        self.ids = index.ids
        self.position = index.position
        self.coefficients = [coefficients(info) for info in self.infos]
        self.constants = list(map(worker_constants, self.infos, self.coefficients))
        self.distinct = dict(zip(map(id, self.coefficients), self.coefficients, strict=True))
        self.per_token_s = np.array([k.per_token_s for k in self.coefficients], dtype=float)
        self.floor_s = np.array([k.floor_s for k in self.coefficients], dtype=float)
        self.price = np.array([info.price_per_hour for info in self.infos], dtype=float)

    def matches(self, infos: list[WorkerInfo]) -> bool:
        return infos == self.infos


def infos_of(views: Sequence[WorkerView]) -> list[WorkerInfo]:
    return list(map(_info, views))


def smallest_positions(values: npt.NDArray[np.float64], count: int) -> list[int]:
    """The positions of the ``count`` smallest values, ties to the earlier position: the
    first ``count`` of a stable argsort, as a set (in no particular order), found by a
    partition around the count-th smallest value instead of a full sort."""
    if count <= 0:
        return []
    if count >= len(values):
        return list(range(len(values)))
    threshold = np.partition(values, count - 1)[count - 1]
    if threshold != threshold:     # NaN among the smallest: argsort's NaN order decides
        head: list[int] = np.argsort(values, kind="stable")[:count].tolist()
        return head
    below: list[int] = np.flatnonzero(values < threshold).tolist()
    tied: list[int] = np.flatnonzero(values == threshold)[:count - len(below)].tolist()
    return below + tied


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
    picked = set(smallest_positions(bound, soonest))
    picked.update(smallest_positions(bound * arrays.price, cheapest))
    picked.update(position[w] for w in heapq.nlargest(most_cached, cached,
                                                      key=cached.__getitem__)
                  if w in position)
    return sorted(picked)
