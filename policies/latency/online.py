"""Online correction of the time estimates from the TTFT and TPOT the router observes.

Each routed request's predicted TTFT and TPOT are remembered (bounded); when it completes,
the log of observed/predicted updates an exponentially weighted mean per worker and per GPU
class. A worker's correction factor is ``exp(mean)`` once it has ``min_samples`` of its own,
its GPU class's before that (a new H100 starts with what the other H100s taught), and 1.0
with nothing learnt. Factors are clamped to ``[1/max_factor, max_factor]``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

Metric = Literal["ttft", "tpot"]


@dataclass(slots=True)
class _Mean:
    value: float = 0.0
    samples: int = 0

    def update(self, x: float, alpha: float) -> None:
        self.samples += 1
        weight = max(alpha, 1.0 / self.samples)     # plain mean while few samples
        self.value += weight * (x - self.value)


@dataclass(frozen=True, slots=True)
class Prediction:
    """The model's uncorrected prediction for one request (the error is learnt on it)."""

    worker_id: str
    gpu_class: str
    ttft_s: float
    tpot_s: float


class OnlineCorrection:
    """Learns multiplicative corrections of predicted TTFT and TPOT per worker and class."""

    __slots__ = ("_by_class", "_by_worker", "_pending", "alpha", "max_factor", "max_pending",
                 "min_samples")

    def __init__(self, alpha: float = 0.05, min_samples: int = 20, max_factor: float = 4.0,
                 max_pending: int = 100_000) -> None:
        self.alpha = alpha
        self.min_samples = min_samples
        self.max_factor = max_factor
        self.max_pending = max_pending
        self._by_worker: dict[tuple[str, Metric], _Mean] = {}
        self._by_class: dict[tuple[str, Metric], _Mean] = {}
        self._pending: OrderedDict[str, Prediction] = OrderedDict()

    def factor(self, worker_id: str, gpu_class: str, metric: Metric) -> float:
        own = self._by_worker.get((worker_id, metric))
        if own is not None and own.samples >= self.min_samples:
            return self._clamp(math.exp(own.value))
        shared = self._by_class.get((gpu_class, metric))
        if shared is not None and shared.samples > 0:
            return self._clamp(math.exp(shared.value))
        return 1.0

    def remember(self, request_id: str, prediction: Prediction) -> None:
        self._pending[request_id] = prediction
        while len(self._pending) > self.max_pending:
            self._pending.popitem(last=False)

    def forget(self, request_id: str) -> Prediction | None:
        return self._pending.pop(request_id, None)

    def observe(self, request_id: str, ttft_s: float | None, tpot_s: float | None) -> None:
        """Compare a finished request's TTFT/TPOT with what was predicted for it."""
        prediction = self._pending.pop(request_id, None)
        if prediction is None:
            return
        for metric, observed, predicted in (("ttft", ttft_s, prediction.ttft_s),
                                            ("tpot", tpot_s, prediction.tpot_s)):
            if observed is None or observed <= 0 or predicted <= 0:
                continue
            x = math.log(observed / predicted)
            key_metric: Metric = metric  # type: ignore[assignment]
            self._by_worker.setdefault((prediction.worker_id, key_metric), _Mean()).update(
                x, self.alpha)
            self._by_class.setdefault((prediction.gpu_class, key_metric), _Mean()).update(
                x, self.alpha)

    def samples(self, worker_id: str, metric: Metric) -> int:
        own = self._by_worker.get((worker_id, metric))
        return own.samples if own is not None else 0

    def _clamp(self, factor: float) -> float:
        return min(self.max_factor, max(1.0 / self.max_factor, factor))
