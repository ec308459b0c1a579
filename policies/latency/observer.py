"""Shared plumbing of the plugins that decide on time estimates (scorers and the picker).

``EstimatingPlugin`` gives each of them the same three things: this decision's estimates
(computed once per decision and shared through the ``CycleState``), the learning hooks
(``on_routed`` records the chosen worker's raw prediction and prefill arrival;
``on_completed`` feeds the observed TTFT/TPOT to the online correction) and
``inherit_state`` so a hot reload keeps what was learnt. The plugins of one profile share one
estimator, and only the first of them learns.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.base import CycleState, Decision, RequestOutcome, RoutingRequest
from policies.candidate_index import CandidateIndex
from policies.errors import ParamError
from policies.latency.estimator import Estimate, TimeEstimator, estimates_for
from policies.latency.step_model import coefficients_for_worker
from policies.profile import _clamped
from workers.models import WorkerView

ESTIMATOR_STATE_KEY = "latency.estimator"   # BuildContext.profile_state key -> SharedEstimator
# request.attributes: (the worker it was sent to, that worker's Estimate), its last attempt's
# with an estimate, for the cost of what it was served (``estimator.served_cost_usd``)
ROUTED_ESTIMATE = "latency.routed_estimate"
MAX_UNROUTED = 4096   # decisions kept until their on_routed (a rejected one never comes)


@dataclass(slots=True)
class LatencySample:
    """One routed request's inputs, predictions and (once finished) observed latency, for
    evaluating estimators offline (``policies.latency.evaluate``)."""

    arrival_s: float
    gpu_class: str
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    inflight_prefill_tokens: int
    running: int
    waiting: int
    inflight_requests: int
    kv_usage: float
    raw_ttft_s: float
    raw_tpot_s: float
    ttft_s: float                  # with the online correction in force at the time
    tpot_s: float
    observed_ttft_s: float | None = None
    observed_tpot_s: float | None = None
    worker_id: str = ""


def unit_column(index: CandidateIndex, estimates: Mapping[str, Estimate],
                scores: list[float]) -> list[float]:
    """A column in view order holding ``scores`` (in the order of ``estimates``) clamped as
    the profile clamps (``policies.profile``: as they are when every one is in [0, 1], else
    each clamped, NaN counting 0), and 0.0 for workers without an estimate. When every
    candidate has an estimate, in view order (fleets up to the shortlist size), that is
    ``scores`` itself."""
    scores = _clamped(scores)
    if len(scores) == len(index.ids) and list(estimates) == index.ids:
        return scores
    column = [0.0] * len(index.ids)
    position = index.position
    for worker_id, value in zip(estimates, scores, strict=True):
        column[position[worker_id]] = value
    return column


class SharedEstimator:
    """The one ``TimeEstimator`` of a profile, held in a box so that a hot reload can hand
    the learnt one to every plugin of the new profile at once (``inherited``: it has)."""

    __slots__ = ("estimator", "inherited")

    def __init__(self, estimator: TimeEstimator) -> None:
        self.estimator = estimator
        self.inherited = False


class EstimatingPlugin:
    """Base of the estimated-time and cost scorers.

    The estimating plugins of one profile share one estimator (``shared``: the profile's
    ``BuildContext.profile_state``): the first one built owns it and is the only one that
    learns (``learns``), so each routed and each finished request is learnt from once. The
    others read the same estimates and must ask for the same ``default_output_tokens``.
    """

    def __init__(self, name: str, default_output_tokens: int = 256,
                 shared: MutableMapping[str, Any] | None = None) -> None:
        self.name = name
        box = shared.get(ESTIMATOR_STATE_KEY) if shared is not None else None
        if isinstance(box, SharedEstimator):
            owned = box.estimator.default_output_tokens
            if owned != default_output_tokens:
                raise ParamError("default_output_tokens",
                                 f"{default_output_tokens} differs from the {owned} of this "
                                 "profile's first estimated-time/cost plugin (they share "
                                 "one estimator)")
            self.learns = False
        else:
            box = SharedEstimator(TimeEstimator(coefficients_for_worker,
                                                default_output_tokens=default_output_tokens))
            if shared is not None:
                shared[ESTIMATOR_STATE_KEY] = box
            self.learns = True
        self._box = box
        self._recent: OrderedDict[str, tuple[dict[str, Estimate], Sequence[WorkerView]]] = (
            OrderedDict())
        self.samples: dict[str, LatencySample] | None = None   # set to a dict to record

    @property
    def estimator(self) -> TimeEstimator:
        return self._box.estimator

    @estimator.setter
    def estimator(self, estimator: TimeEstimator) -> None:
        self._box.estimator = estimator

    def estimates(self, request: RoutingRequest, workers: Sequence[WorkerView],
                  cycle: CycleState) -> dict[str, Estimate]:
        known = estimates_for(cycle, request, workers, self.estimator)
        if self.learns:
            self._recent[request.request_id] = (known, workers)
            while len(self._recent) > MAX_UNROUTED:
                self._recent.popitem(last=False)
        return known

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        entry = self._recent.pop(request.request_id, None)
        if entry is None or decision.worker_id is None:
            return
        known, workers = entry
        estimate = known.get(decision.worker_id)
        view = next((v for v in workers if v.id == decision.worker_id), None)
        if estimate is not None and view is not None:
            request.attributes[ROUTED_ESTIMATE] = (view.id, estimate)   # its cost's basis
            self.estimator.on_routed(request, view.id, view.gpu.name, estimate)
            if self.samples is not None:
                self.samples[request.request_id] = LatencySample(
                    request.arrival_time, view.gpu.name, request.num_prompt_tokens,
                    estimate.cached_tokens, self.estimator.output_tokens(request),
                    view.inflight_prefill_tokens, view.running, view.waiting,
                    view.inflight_requests, view.kv_usage, estimate.raw_ttft_s,
                    estimate.raw_tpot_s, estimate.ttft_s, estimate.tpot_s,
                    worker_id=view.id)

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        if not self.learns:
            return
        if outcome.status == 200:
            self.estimator.observe(outcome.request_id, outcome.ttft_s, outcome.tpot_s)
            sample = self.samples.get(outcome.request_id) if self.samples is not None else None
            if sample is not None:
                sample.observed_ttft_s, sample.observed_tpot_s = outcome.ttft_s, outcome.tpot_s
        else:
            self.estimator.correction.forget(outcome.request_id)

    def forget_worker(self, worker_id: str) -> None:
        """The worker's engine restarted, or a reloaded fleet removed it or put another
        server under its id: its coefficients and kept view terms go (recomputed from its
        declaration if it is still there), and what was learnt of its own answers (the
        online correction's factors; its class's stay) and of the prefill routed to it."""
        self.estimator.forget(worker_id)

    def inherit_state(self, previous: object) -> None:
        """Take over what the previous configuration's estimator learnt, for every plugin of
        the profile: from the first of them (in declared order) that has a predecessor."""
        box = self._box
        if box.inherited or not isinstance(previous, EstimatingPlugin):
            return
        default_output = box.estimator.default_output_tokens
        box.estimator = previous.estimator
        box.estimator.default_output_tokens = default_output
        box.inherited = True
