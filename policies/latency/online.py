"""Online correction of the time estimates from the TTFT and TPOT the router observes.

Each routed request's predicted TTFT and TPOT are remembered (bounded); when it completes,
the log of observed/predicted updates an exponentially weighted mean per worker and per GPU
class. A worker's correction factor is ``exp(mean)`` once it has ``min_samples`` of its own,
its GPU class's before that (a new H100 starts with what the other H100s taught), and 1.0
with nothing learnt. Factors are clamped to ``[1/max_factor, max_factor]``.

Beside the mean, the ``quantile`` (0.9 by default) of the same log ratio is tracked by
stochastic approximation: ``upper()`` is the factor a prediction must be multiplied by to be
exceeded by only one request in ten. The SLO picker tests candidates against that
conservative estimate, so that the share of requests meeting the SLO is what the goodput
target (90 %) asks for, whatever the model's error on this workload.

TTFT's error is not one factor per worker: it depends on the request. A prompt with little
left to prefill is late by the step already running when it arrives, which the model leaves
out, so its TTFT comes out several times the estimate; a prompt arriving behind other
prefills is early, because part of the queued prefill is done by then. So with
``ttft_regimes`` (on by default) TTFT's mean and quantile are also learnt per **regime**
(``ttft_regime``: the uncached tokens in buckets of a factor of 4, and whether prefill is
queued ahead), per worker and per GPU class, and read in this order: the worker's in the
request's regime, the class's in that regime, then the worker's and the class's over all
regimes (each once it has ``min_samples``; the class's over all regimes from the first).
TPOT keeps one factor per worker: keyed by regime its error moved both ways across traces.
Regimes are few (100,000 uncached tokens are in bucket 8), so the tables stay bounded by the
workers and classes seen.

Each metric's correction is **judged** against the model alone: every finished request
scores the raw model (``|ln observed/raw|``) and the correction as it had learnt it when the
request was routed (the factor for that worker and regime then), neither having seen that
request; their mean errors run over the last ``judge_window`` (200) requests
(``judgement``, exported as ``kvroute_estimate_error``). With ``follow_judgement`` (off by
default) a metric's mean factor is applied only while the correction's error is the smaller
(and until ``min_samples`` requests were compared), else it reads 1; the 90th percentile is
learnt on the raw prediction and read either way. It is off because the smaller error is not
the better routing: TPOT's raw estimate sits at the median of a right-skewed error, which the
mean |ln| rewards, and the correction at its mean, higher; on a decode-heavy trace the
higher expected TPOT kept more requests within the SLO (``docs/benchmarks.md``, "The
correction judged against the raw model").

Every decision reads the four factors of each candidate (``factors``), and they change only
when a request completes (``observe``), so they are kept per worker and regime: an
observation drops the kept factors of its worker, and of the workers that borrowed its GPU
class's, and the next decision computes those again. Each statistic keeps the clamped factor
it stands for, refreshed when it learns (outside any decision), so computing a worker's
factors again is a few dictionary reads. The parameters are fixed at construction.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Metric = Literal["ttft", "tpot"]
Key = tuple[str, Metric] | tuple[str, Metric, int]
"""(worker id or GPU class, metric) over all regimes, or (…, metric, regime)."""
Factors = tuple[float, float, float | None, float | None]
"""(TTFT factor, TPOT factor, TTFT upper, TPOT upper): ``OnlineCorrection.factors``."""


def ttft_regime(uncached_tokens: int, queued_tokens: int) -> int:
    """The regime TTFT's correction is learnt in: ``2 × b + q`` with ``b`` the bucket of the
    uncached prompt tokens (``bit_length // 2``: 1, 2–3 | 4–15 | 16–63 | … | 16,384–65,535 …,
    a factor of 4 each) and ``q`` 1 when prefill is queued ahead on the worker."""
    bucket = uncached_tokens.bit_length() >> 1 if uncached_tokens > 0 else 0
    return bucket * 2 + (1 if queued_tokens > 0 else 0)


def _factor_of(log_value: float, max_factor: float) -> float:
    """``exp(log_value)`` clamped to ``[1/max_factor, max_factor]``."""
    return min(max_factor, max(1.0 / max_factor, math.exp(log_value)))


@dataclass(slots=True)
class _Quantile:
    """Stochastic-approximation tracker of one quantile of a stream (in log space), and the
    clamped factor it stands for (``factor``, refreshed by each update)."""

    value: float = 0.0
    samples: int = 0
    factor: float = 1.0

    def update(self, x: float, tau: float, step: float, max_factor: float) -> None:
        self.samples += 1
        if self.samples == 1:
            self.value = x
        else:
            self.value += step * (tau - (1.0 if x < self.value else 0.0))
        self.factor = _factor_of(self.value, max_factor)


@dataclass(slots=True)
class _Mean:
    """Exponentially weighted mean of a stream (in log space), and the clamped factor it
    stands for (``factor``, refreshed by each update)."""

    value: float = 0.0
    samples: int = 0
    factor: float = 1.0

    def update(self, x: float, alpha: float, max_factor: float) -> None:
        self.samples += 1
        weight = max(alpha, 1.0 / self.samples)     # plain mean while few samples
        self.value += weight * (x - self.value)
        self.factor = _factor_of(self.value, max_factor)


@dataclass(slots=True)
class _Judge:
    """How far off the raw model and the correction were on the requests observed so far:
    the mean |log observed/predicted| of each (plain means over the first ``window``
    comparisons, then exponentially weighted with weight ``1 / window``)."""

    raw: float = 0.0
    corrected: float = 0.0
    samples: int = 0

    def update(self, raw_error: float, corrected_error: float, window: int) -> None:
        self.samples += 1
        weight = 1.0 / min(self.samples, window)
        self.raw += weight * (raw_error - self.raw)
        self.corrected += weight * (corrected_error - self.corrected)


@dataclass(frozen=True, slots=True)
class Prediction:
    """The model's uncorrected prediction for one request (the error is learnt on it), and
    its TTFT regime (``ttft_regime``; None: learnt over all regimes only)."""

    worker_id: str
    gpu_class: str
    ttft_s: float
    tpot_s: float
    regime: int | None = None


class OnlineCorrection:
    """Learns multiplicative corrections of predicted TTFT and TPOT per worker and class."""

    __slots__ = ("_borrowers", "_by_class", "_by_worker", "_judges", "_kept", "_pending",
                 "_trusted", "_upper_by_class", "_upper_by_worker", "alpha",
                 "follow_judgement", "judge_window", "max_factor", "max_pending", "min_samples",
                 "quantile", "quantile_step", "ttft_regimes")

    def __init__(self, alpha: float = 0.05, min_samples: int = 20, max_factor: float = 4.0,
                 max_pending: int = 100_000, quantile: float = 0.9,
                 quantile_step: float = 0.05, ttft_regimes: bool = True,
                 follow_judgement: bool = False, judge_window: int = 200) -> None:
        self.alpha = alpha
        self.ttft_regimes = ttft_regimes
        self.follow_judgement = follow_judgement
        self.judge_window = judge_window
        # per metric: the raw model's and the correction's error so far, and whether the
        # correction is in force (always, unless ``follow_judgement`` puts it out)
        self._judges: dict[Metric, _Judge] = {"ttft": _Judge(), "tpot": _Judge()}
        self._trusted: dict[Metric, bool] = {"ttft": True, "tpot": True}
        self.quantile = quantile
        self.quantile_step = quantile_step
        self._upper_by_worker: dict[Key, _Quantile] = {}
        self._upper_by_class: dict[Key, _Quantile] = {}
        self.min_samples = min_samples
        self.max_factor = max_factor
        self.max_pending = max_pending
        self._by_worker: dict[Key, _Mean] = {}
        self._by_class: dict[Key, _Mean] = {}
        # request id -> its prediction and the learnt TTFT and TPOT factors at routing (the
        # correction's own prediction, judged against the raw model's when it completes)
        self._pending: OrderedDict[str, tuple[Prediction, float | None, float | None]] = (
            OrderedDict())
        # worker id -> (its GPU class, its ``factors`` by regime), as long as nothing they
        # read changed
        self._kept: dict[str, tuple[str, dict[int | None, Factors]]] = {}
        # GPU class -> the workers whose kept factors read some of the class's statistics
        self._borrowers: dict[str, set[str]] = {}

    def factor(self, worker_id: str, gpu_class: str, metric: Metric,
               regime: int | None = None) -> float:
        """exp(mean log observed/predicted), from the most specific statistics learnt enough
        (``regime``: TTFT's, ``ttft_regime``; ignored for TPOT and without ``ttft_regimes``);
        1.0 while the metric's correction predicts worse than the raw model and
        ``follow_judgement`` is on."""
        if not self._trusted[metric]:
            return 1.0
        found = self._learnt(worker_id, gpu_class, metric, regime)
        return found if found is not None else 1.0

    def upper(self, worker_id: str, gpu_class: str, metric: Metric,
              regime: int | None = None) -> float | None:
        """The ``quantile`` (0.9) of observed/predicted: a prediction times this is exceeded
        by one request in ten. None until something was learnt. ``regime`` as in ``factor``."""
        return self._read(self._upper_by_worker, self._upper_by_class, worker_id, gpu_class,
                          metric, self._regime_of(metric, regime), self.min_samples)[0]

    def _learnt(self, worker_id: str, gpu_class: str, metric: Metric,
                regime: int | None) -> float | None:
        """The learnt mean factor, in force or not (``factor`` before the judgement and the
        default of 1.0); None before anything was learnt for the worker or its class."""
        return self._read(self._by_worker, self._by_class, worker_id, gpu_class, metric,
                          self._regime_of(metric, regime), 1)[0]

    def _regime_of(self, metric: Metric, regime: int | None) -> int | None:
        """The regime ``metric`` is read in: TTFT's with ``ttft_regimes``, else None."""
        return regime if metric == "ttft" and self.ttft_regimes else None

    def _read(self, by_worker: Mapping[Key, _Mean] | Mapping[Key, _Quantile],
              by_class: Mapping[Key, _Mean] | Mapping[Key, _Quantile], worker_id: str,
              gpu_class: str, metric: Metric, regime: int | None,
              class_least: int) -> tuple[float | None, bool]:
        """One statistic's factor, from the first of: the worker's in ``regime``, the
        class's in ``regime`` (when ``regime`` is given), the worker's over all regimes (each
        with ``min_samples``), the class's over all regimes (with ``class_least``); None when
        none is learnt enough. And whether it is the worker's own, which nothing the class
        learns can change (its own in ``regime``, or over all regimes when none is given)."""
        least = self.min_samples
        if regime is not None:
            learnt = by_worker.get((worker_id, metric, regime))
            if learnt is not None and learnt.samples >= least:
                return learnt.factor, True
            learnt = by_class.get((gpu_class, metric, regime))
            if learnt is not None and learnt.samples >= least:
                return learnt.factor, False
        learnt = by_worker.get((worker_id, metric))
        if learnt is not None and learnt.samples >= least:
            return learnt.factor, regime is None
        learnt = by_class.get((gpu_class, metric))
        if learnt is not None and learnt.samples >= class_least:
            return learnt.factor, False
        return None, False

    def has_learnt(self) -> bool:
        """Whether any outcome was observed (before that every factor is 1, no upper)."""
        return bool(self._by_class)

    def factors(self, worker_id: str, gpu_class: str, regime: int | None = None) -> Factors:
        """``factor`` and ``upper`` of TTFT and TPOT: (ttft, tpot, ttft upper, tpot upper);
        ``regime``: the request's ``ttft_regime`` on this worker (read as None, and kept once
        per worker, without ``ttft_regimes``)."""
        if not self.ttft_regimes:
            regime = None
        kept = self._kept.get(worker_id)
        if kept is not None and kept[0] == gpu_class:
            found = kept[1].get(regime)
            if found is not None:
                return found
        if not self._by_class:      # nothing observed yet (every table fills together)
            return 1.0, 1.0, None, None
        read, least = self._read, self.min_samples
        by_worker, by_class = self._by_worker, self._by_class
        upper_by_worker, upper_by_class = self._upper_by_worker, self._upper_by_class
        ttft, own_ttft = read(by_worker, by_class, worker_id, gpu_class, "ttft", regime, 1)
        tpot, own_tpot = read(by_worker, by_class, worker_id, gpu_class, "tpot", None, 1)
        ttft_upper, own_ttft_upper = read(upper_by_worker, upper_by_class, worker_id,
                                          gpu_class, "ttft", regime, least)
        tpot_upper, own_tpot_upper = read(upper_by_worker, upper_by_class, worker_id,
                                          gpu_class, "tpot", None, least)
        trusted = self._trusted
        found = (ttft if ttft is not None and trusted["ttft"] else 1.0,
                 tpot if tpot is not None and trusted["tpot"] else 1.0, ttft_upper, tpot_upper)
        if kept is None or kept[0] != gpu_class:
            kept = self._kept[worker_id] = (gpu_class, {})
        kept[1][regime] = found
        if not (own_ttft and own_tpot and own_ttft_upper and own_tpot_upper):
            # some of them are its class's, or may become so when the class learns more
            self._borrowers.setdefault(gpu_class, set()).add(worker_id)
        return found

    def remember(self, request_id: str, prediction: Prediction) -> None:
        """``request_id`` was routed as ``prediction`` says; also note what the correction
        learnt so far would predict for it (in force or not), to judge it by."""
        worker_id, gpu_class, regime = prediction.worker_id, prediction.gpu_class, prediction.regime
        self._pending[request_id] = (prediction,
                                     self._learnt(worker_id, gpu_class, "ttft", regime),
                                     self._learnt(worker_id, gpu_class, "tpot", regime))
        while len(self._pending) > self.max_pending:
            self._pending.popitem(last=False)

    def forget(self, request_id: str) -> Prediction | None:
        entry = self._pending.pop(request_id, None)
        return entry[0] if entry is not None else None

    def forget_worker(self, worker_id: str) -> None:
        """What was learnt of the worker's own answers goes (its class's stays): its engine
        restarted, or the fleet removed it or put another server under its id."""
        for table in (self._by_worker, self._upper_by_worker):
            for key in [key for key in table if key[0] == worker_id]:
                del table[key]
        # its requests in flight, ending later, would teach the server next under its id
        for request_id in [request_id for request_id, entry in self._pending.items()
                           if entry[0].worker_id == worker_id]:
            del self._pending[request_id]
        self._kept.pop(worker_id, None)
        for borrowers in self._borrowers.values():
            borrowers.discard(worker_id)

    def observe(self, request_id: str, ttft_s: float | None, tpot_s: float | None) -> None:
        """Compare a finished request's TTFT/TPOT with what was predicted for it."""
        entry = self._pending.pop(request_id, None)
        if entry is None:
            return
        prediction, ttft_learnt, tpot_learnt = entry
        self._kept.pop(prediction.worker_id, None)
        for borrower in self._borrowers.pop(prediction.gpu_class, ()):
            self._kept.pop(borrower, None)
        for metric, observed, predicted, learnt in (
                ("ttft", ttft_s, prediction.ttft_s, ttft_learnt),
                ("tpot", tpot_s, prediction.tpot_s, tpot_learnt)):
            if observed is None or observed <= 0 or predicted <= 0:
                continue
            x = math.log(observed / predicted)
            key_metric: Metric = metric  # type: ignore[assignment]
            self._judge(key_metric, x, learnt)
            keys: list[tuple[Key, Key]] = [((prediction.worker_id, key_metric),
                                            (prediction.gpu_class, key_metric))]
            if metric == "ttft" and self.ttft_regimes and prediction.regime is not None:
                keys.append(((prediction.worker_id, key_metric, prediction.regime),
                             (prediction.gpu_class, key_metric, prediction.regime)))
            bound = self.max_factor
            for worker_key, class_key in keys:
                self._by_worker.setdefault(worker_key, _Mean()).update(x, self.alpha, bound)
                self._by_class.setdefault(class_key, _Mean()).update(x, self.alpha, bound)
                for table, key in ((self._upper_by_worker, worker_key),
                                   (self._upper_by_class, class_key)):
                    table.setdefault(key, _Quantile()).update(x, self.quantile,
                                                              self.quantile_step, bound)

    def _judge(self, metric: Metric, x: float, learnt: float | None) -> None:
        """Score the raw model (error ``|x|``, ``x`` the log of observed/raw) and the
        correction as it stood when the request was routed (``learnt``: its factor then, None
        for none) on one finished request, which neither had seen; with ``follow_judgement``,
        put the correction in force, or out of it, by which was nearer so far."""
        judge = self._judges[metric]
        judge.update(abs(x), abs(x - math.log(learnt)) if learnt is not None else abs(x),
                     self.judge_window)
        if not self.follow_judgement or judge.samples < self.min_samples:
            return
        trusted = judge.corrected <= judge.raw
        if trusted != self._trusted[metric]:
            self._trusted[metric] = trusted
            self._kept.clear()          # every kept factor of the metric changes
            self._borrowers.clear()

    def correcting(self, metric: Metric) -> bool:
        """Whether ``metric``'s correction is in force: always, unless ``follow_judgement`` put
        it out for predicting the finished requests worse than the raw model."""
        return self._trusted[metric]

    def judgement(self, metric: Metric) -> tuple[float, float, int]:
        """(the raw model's, the correction's) mean |log observed/predicted| so far, and
        over how many requests."""
        judge = self._judges[metric]
        return judge.raw, judge.corrected, judge.samples

    def samples(self, worker_id: str, metric: Metric) -> int:
        own = self._by_worker.get((worker_id, metric))
        return own.samples if own is not None else 0
