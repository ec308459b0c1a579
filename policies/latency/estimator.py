"""Per-worker estimates of a request's TTFT, TPOT, GPU-seconds and dollar cost.

For worker ``w`` with the request's cached prefix ``p`` there and ``U`` uncached tokens:

* **TTFT** = the prefill work ahead of it and its own, ``W + U`` tokens (``W``: the router's
  in-flight uncached prefill tokens for ``w``), pushed through steps of
  ``C = max_num_batched_tokens − D`` prefill tokens that also carry the ``D`` running
  decodes (the decode-pressure term), plus its own prefill attention over ``p`` (quadratic
  in long prompts), plus a wait for a batch slot when ``max_num_seqs`` is full.
* **TPOT** = a decode step of the batch it joins (``D + 1`` sequences at the mean context,
  from ``kv_usage``), slowed by the prefill chunks that keep arriving: with ``ρ`` = routed
  uncached prefill tokens per second / the worker's prefill rate, the mean token interval
  is ``1 / ((1 − ρ)/decode_step + ρ/full_step)``.
* **GPU-seconds** = its own prefill compute plus its share of each decode step
  (``out × decode_step / (D + 1)``); **cost** = ``price_per_hour / 3600 × GPU-seconds``.

Step times come from ``StepCoefficients`` solved from the engine's latency model per GPU
class (``policies.latency.step_model``); TTFT and TPOT are multiplied by the online
corrections learnt from observed outcomes (``policies.latency.online``; TTFT's in the
request's regime on that worker: its uncached tokens and whether prefill is queued ahead).
The terms that depend on a worker's view alone (its decode step, full step, chunk and batch:
``view_terms``) are kept while the view fields they read repeat, which between two decisions
is every worker but the one routed to last and those scraped since.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from policies.base import CycleState, RoutingRequest, output_tokens_in_window
from policies.candidate_index import CandidateIndex, candidate_index
from policies.latency.candidate_arrays import (
    CandidateArrays,
    WorkerConstants,
    infos_of,
    shortlist_positions,
    worker_constants,
)
from policies.latency.online import OnlineCorrection, Prediction
from policies.latency.step_model import StepCoefficients
from policies.prefix.matching import MATCH_KEY, PrefixMatch
from workers.models import WorkerInfo, WorkerView

ESTIMATES_KEY = "latency.estimates"   # CycleState key -> dict[worker id, Estimate]
IDLE_PREFILL_KEY = "latency.idle_prefill_s"   # the prompt's prefill on the fastest idle GPU
MAX_PREFILL_SHARE = 0.9
SHORTLIST = 32                        # larger fleets are estimated on a shortlist

CoefficientsFn = Callable[[WorkerInfo], StepCoefficients]


class Estimate(NamedTuple):
    """One worker's estimates for one request. A named tuple: one is built per estimated
    worker per decision, and a tuple is built in C (``new_estimate``) where a frozen
    dataclass sets its fields one by one."""

    ttft_s: float
    tpot_s: float
    gpu_s: float
    cost_usd: float
    cached_tokens: int
    raw_ttft_s: float          # before the online correction
    raw_tpot_s: float
    prefill_s: float = 0.0     # its own prefill compute (the part of TTFT without waiting)
    ttft_upper_s: float | None = None   # the learnt 90th percentile, once known
    tpot_upper_s: float | None = None
    prefill_steps: int = 1     # engine steps its own uncached prefill spans (chunked prefill)
    # the whole prompt's prefill compute here with nothing cached: the hardware's speed on
    # this prompt, the same on every worker of one GPU class whatever each has cached
    full_prefill_s: float | None = None
    # the regime TTFT's online correction was read in (``policies.latency.online.ttft_regime``)
    ttft_regime: int | None = None
    output_tokens: int = 0     # the answer ``gpu_s`` prices (every sequence's, in its window)
    gpu_s_per_output_token: float = 0.0   # each of them: its share of a decode step


def served_cost_usd(estimated_cost_usd: float, estimate: Estimate | None,
                    completion_tokens: int) -> float:
    """``estimated_cost_usd`` (price x the estimate's GPU-seconds, for the answer it
    expected) for the answer served: the same prefill, and ``completion_tokens`` at the
    estimate's GPU-seconds per output token. Unchanged without the estimate."""
    if estimate is None or estimate.gpu_s <= 0.0:
        return estimated_cost_usd
    per_token = estimate.gpu_s_per_output_token
    prefill_gpu_s = max(0.0, estimate.gpu_s - estimate.output_tokens * per_token)
    return estimated_cost_usd * (prefill_gpu_s + completion_tokens * per_token) / estimate.gpu_s


def new_estimate(ttft_s: float, tpot_s: float, gpu_s: float, cost_usd: float,
                 cached_tokens: int, raw_ttft_s: float, raw_tpot_s: float, prefill_s: float,
                 ttft_upper_s: float | None, tpot_upper_s: float | None,
                 prefill_steps: int = 1, full_prefill_s: float | None = None,
                 ttft_regime: int | None = None, output_tokens: int = 0,
                 gpu_s_per_output_token: float = 0.0) -> Estimate:
    """``Estimate(...)`` with every field given, positionally."""
    return _new_tuple(Estimate, (ttft_s, tpot_s, gpu_s, cost_usd, cached_tokens, raw_ttft_s,
                                 raw_tpot_s, prefill_s, ttft_upper_s, tpot_upper_s,
                                 prefill_steps, full_prefill_s, ttft_regime, output_tokens,
                                 gpu_s_per_output_token))


_new_tuple = tuple.__new__


ViewTerms = tuple[int, float, int, int, float, int, int, float | None, float, float | None,
                  float]
"""(decoding, decode_part, queued prefill, 1 when prefill is queued else 0, chunk, in_batch,
joined, decode step or None when nothing decodes, full step, slot ratio or None when a batch
slot is free, a full prefill chunk's step beside the decodes): the parts of a worker's
estimates that depend on its view alone (``view_terms``)."""


def view_terms(state: tuple[int, int, int, float, int, int, int],
               constants: WorkerConstants) -> ViewTerms:
    """The view-only parts of ``TimeEstimator.estimate_into`` for one worker, from its
    (running, waiting, inflight_requests, kv_usage, num_gpu_blocks, block_size,
    inflight_prefill_tokens) and its constants; the same expressions, evaluated in the same
    order, so the estimates are the same to the last bit."""
    (_, _, _, _, _, fixed, base, per_token, _, per_ctx, per_seq, max_batched, most,
     max_num_seqs) = constants
    running, waiting, inflight, kv_usage, num_gpu_blocks, block_size, queued = state
    decoding = running if running > 0 else 0
    # (conditional expressions below stand for max/min, with their tie and NaN rules)
    queued_batch = running + waiting
    in_batch = inflight if inflight > queued_batch else queued_batch
    context_sum = kv_usage * num_gpu_blocks * block_size
    # shared by every step while this worker decodes its running batch
    decode_part = per_ctx * context_sum + per_seq * decoding
    room = max_batched - (most if most < decoding else decoding)
    chunk = float(room if room > 1 else 1)
    joined = in_batch + 1
    decode_step: float | None = None
    if decoding:
        mean_context = context_sum / decoding
        linear = per_token * joined
        decode_step = (fixed + (linear if linear > base else base)
                       + per_ctx * joined * mean_context + per_seq * in_batch)
    slot_ratio = ((in_batch - max_num_seqs + 1) / max_num_seqs if in_batch >= max_num_seqs
                  else None)
    linear = per_token * (chunk + joined)
    full_step = (fixed + (linear if linear > base else base) + per_ctx * context_sum
                 + per_seq * in_batch)
    # every step but the last of a prefill longer than one chunk: a full chunk beside the decodes
    linear = per_token * (chunk + decoding)
    chunk_step = fixed + (linear if linear > base else base) + decode_part
    return (decoding, decode_part, queued if queued > 0 else 0, 1 if queued > 0 else 0, chunk,
            in_batch, joined, decode_step, full_step, slot_ratio, chunk_step)


class PrefillArrivals:
    """Exponentially decayed rates of uncached prefill tokens routed to each worker, at a few
    time constants: a request's TPOT suffers from the prefill that arrives while it decodes,
    so ``rate`` answers for the time constant nearest that request's decode horizon (a burst
    matters to a 30-token answer, a steady stream to a 500-token one)."""

    __slots__ = ("_bounds", "_state", "taus_s")

    def __init__(self, taus_s: tuple[float, ...] = (1.0, 4.0, 16.0)) -> None:
        self.taus_s = taus_s
        # horizon below bounds[i] -> taus_s[i] (geometric midpoints: nearest in log terms)
        self._bounds = tuple(math.sqrt(a * b) for a, b in itertools.pairwise(taus_s))
        self._state: dict[str, tuple[list[float], float]] = {}   # worker -> (rates, at)

    def add(self, worker_id: str, tokens: int, now: float) -> None:
        rates = self._decayed(worker_id, now)
        self._state[worker_id] = ([r + tokens / tau for r, tau in zip(rates, self.taus_s,
                                                                         strict=True)], now)

    def rate(self, worker_id: str, now: float, horizon_s: float | None = None) -> float:
        """Tokens per second, over the time constant nearest ``horizon_s`` (longest if None)."""
        entry = self._state.get(worker_id)
        if entry is None:
            return 0.0
        # the first bound above the horizon (the last time constant when none is, or NaN)
        index = len(self.taus_s) - 1 if horizon_s is None else bisect_right(self._bounds,
                                                                            horizon_s)
        rates, at = entry
        return rates[index] * math.exp(-max(0.0, now - at) / self.taus_s[index])

    def forget(self, worker_id: str) -> None:
        self._state.pop(worker_id, None)

    def _decayed(self, worker_id: str, now: float) -> list[float]:
        entry = self._state.get(worker_id)
        if entry is None:
            return [0.0] * len(self.taus_s)
        rates, at = entry
        elapsed = max(0.0, now - at)
        return [r * math.exp(-elapsed / tau) for r, tau in zip(rates, self.taus_s, strict=True)]


class TimeEstimator:
    """Estimates per worker; learns from outcomes through ``observe``."""

    __slots__ = ("_arrays", "_by_worker", "_coefficients", "_prefill_memo", "_source",
                 "_view_terms", "arrivals", "correction", "default_output_tokens")

    def __init__(self, coefficients: CoefficientsFn, correction: OnlineCorrection | None = None,
                 arrivals: PrefillArrivals | None = None,
                 default_output_tokens: int = 256) -> None:
        self._source = coefficients
        self._coefficients: dict[str, StepCoefficients] = {}   # by hardware and limits
        self._by_worker: dict[str, tuple[WorkerInfo, StepCoefficients]] = {}
        self._arrays: CandidateArrays | None = None   # the last decision's candidates
        # one decision's prefill times by (coefficients, uncached, cached); see estimates_for
        self._prefill_memo: dict[tuple[int, int, int], float] = {}
        # worker id -> (its constants, the view state, view_terms of them): most views repeat
        # between decisions (only the worker last routed to and freshly scraped ones change)
        self._view_terms: dict[str, tuple[WorkerConstants, tuple[int, int, int, float, int,
                                                                 int, int], ViewTerms]] = {}
        self.correction = correction if correction is not None else OnlineCorrection()
        self.arrivals = arrivals if arrivals is not None else PrefillArrivals()
        self.default_output_tokens = default_output_tokens

    def coefficients(self, info: WorkerInfo) -> StepCoefficients:
        """The worker's step-time coefficients: by its id while the fleet file declares it
        the same (a reloaded fleet may give an id another GPU or model), else computed once
        per distinct hardware and engine limits."""
        known = self._by_worker.get(info.id)
        if known is not None and (known[0] is info or known[0] == info):
            return known[1]
        key = (f"{info.gpu!r}|{info.model_spec!r}|{info.tensor_parallel}|"
               f"{info.max_num_seqs}|{info.max_num_batched_tokens}")
        coefficients = self._coefficients.get(key)
        if coefficients is None:
            coefficients = self._coefficients[key] = self._source(info)
        self._by_worker[info.id] = (info, coefficients)
        return coefficients

    def forget(self, worker_id: str) -> None:
        """Everything kept of the worker: its coefficients and view terms, the online
        correction's own factors and its routed prefill's rate."""
        self._by_worker.pop(worker_id, None)
        self._view_terms.pop(worker_id, None)
        self.correction.forget_worker(worker_id)
        self.arrivals.forget(worker_id)

    def output_tokens(self, request: RoutingRequest) -> int:
        """The predicted output (``output-length`` producer), else max_tokens, else the
        default."""
        predicted = request.predicted_output_tokens
        if predicted is not None:
            return predicted
        return request.max_tokens if request.max_tokens is not None else self.default_output_tokens

    def estimate(self, request: RoutingRequest, view: WorkerView, cached: int) -> Estimate:
        info = view.info
        known: dict[str, Estimate] = {}
        self.estimate_into(known, request, (view,),
                           (worker_constants(info, self.coefficients(info)),),
                           {info.id: cached})
        return known[info.id]

    def estimate_into(self, known: dict[str, Estimate], request: RoutingRequest,
                      views: Iterable[WorkerView], constants: Iterable[WorkerConstants],
                      cached_tokens: Mapping[str, int]) -> None:
        """``known[id] = the estimate`` for each view (``constants``: its worker's, in the
        same order; ``cached_tokens``: cached prompt tokens by id, absent 0)."""
        prompt = request.num_prompt_tokens if request.num_prompt_tokens > 1 else 1
        output = request.predicted_output_tokens       # self.output_tokens, inlined
        if output is None:
            output = request.max_tokens if request.max_tokens is not None else (
                self.default_output_tokens)
        output = output if output > 1 else 1
        now = request.arrival_time
        arrivals = self.arrivals
        arrivals_of, bounds, taus = arrivals._state.get, arrivals._bounds, arrivals.taus_s
        correction = self.correction
        factors = correction.factors if correction.has_learnt() else None
        # OnlineCorrection.factors' kept answers, read inline (computed by the call on a miss)
        kept_of, by_regime = correction._kept.get, correction.ttft_regimes
        memo = self._prefill_memo
        cached_of = cached_tokens.get
        new_tuple = _new_tuple      # new_estimate, inlined
        exp, ceil, max_share = math.exp, math.ceil, MAX_PREFILL_SHARE
        most_cached, prompt_tokens = prompt - 1, float(prompt)
        # a batch's answers are clamped by each prompt's window (its longest), not the sum's
        in_window = request.longest_prompt_tokens or prompt
        # each sequence (a batch's prompts, n choices) takes its own decode slot
        sequences = request.sequences
        remembered = self._view_terms
        terms_of = remembered.get
        # output_tokens_in_window depends on the worker by its window alone: computed again
        # only when the window differs from the last worker's
        window: int | None = None
        out = output
        full_prefills: dict[int, float] = {}     # by coefficients: nothing cached, this prompt
        for view, constants_of_worker in zip(views, constants, strict=True):
            (worker_id, gpu_class, price_per_s, k, k_id, fixed, base, per_token, per_pair,
             per_ctx, per_seq, _, _, _) = constants_of_worker
            # what depends on the view alone is kept while the worker's view repeats
            state = (view.running, view.waiting, view.inflight_requests, view.kv_usage,
                     view.num_gpu_blocks, view.block_size, view.inflight_prefill_tokens)
            known_terms = terms_of(worker_id)
            if (known_terms is None or known_terms[0] is not constants_of_worker
                    or known_terms[1] != state):
                known_terms = remembered[worker_id] = (constants_of_worker, state,
                                                       view_terms(state, constants_of_worker))
            (decoding, decode_part, queued, queued_bit, chunk, in_batch, joined, decode_step,
             full_step, slot_ratio, chunk_step) = known_terms[2]
            cached = cached_of(worker_id, 0)
            if cached > most_cached:
                cached = most_cached
            uncached = prompt - cached
            if view.max_model_len != window:
                window = view.max_model_len
                out = output_tokens_in_window(output, in_window, window)
            # TTFT: the prefill backlog and this prompt, through steps shared with the decodes
            ahead = queued + uncached
            own_pairs = uncached * cached + uncached * uncached / 2.0
            if ahead <= chunk:
                linear = per_token * (ahead + decoding)
                prefill = (fixed + (linear if linear > base else base) + decode_part
                           + per_pair * own_pairs)
            else:
                steps = ceil(ahead / chunk)
                linear = per_token * (ahead - (steps - 1) * chunk + decoding)
                prefill = ((steps - 1) * chunk_step + fixed + (linear if linear > base else base)
                           + decode_part + per_pair * own_pairs)
            if decode_step is None:       # nothing decoding: the mean context is this prompt
                linear = per_token * joined
                decode_step = (fixed + (linear if linear > base else base)
                               + per_ctx * joined * prompt_tokens + per_seq * in_batch)
            slot_wait = 0.0
            if slot_ratio is not None:
                slot_wait = slot_ratio * out * decode_step
            raw_ttft = prefill + slot_wait
            horizon = raw_ttft + out * decode_step
            entry = arrivals_of(worker_id)     # PrefillArrivals.rate, inlined
            if entry is None:
                arrival_rate = 0.0
            else:
                nearest = bisect_right(bounds, horizon)
                rates, at = entry
                elapsed = now - at
                arrival_rate = rates[nearest] * exp(-(elapsed if elapsed > 0.0 else 0.0)
                                                    / taus[nearest])
            share = arrival_rate * full_step / chunk
            if share > max_share:
                share = max_share
            raw_tpot = 1.0 / ((1.0 - share) / decode_step + share / full_step)
            # online.ttft_regime(uncached, queued), inlined (uncached >= 1 here): the bucket
            # (bit_length >> 1) times 2 is the bit length with its lowest bit cleared
            regime = (uncached.bit_length() & -2) + queued_bit
            if factors is None:     # every factor 1 (x * 1.0 is x), no upper bound yet
                ttft, tpot, ttft_upper, tpot_upper = raw_ttft, raw_tpot, None, None
            else:
                kept = kept_of(worker_id)
                found = (kept[1].get(regime if by_regime else None)
                         if kept is not None and kept[0] == gpu_class else None)
                ttft_factor, tpot_factor, ttft_upper, tpot_upper = (
                    found if found is not None else factors(worker_id, gpu_class, regime))
                ttft = raw_ttft * ttft_factor
                tpot = raw_tpot * tpot_factor
            memo_key = (k_id, uncached, cached)
            own_prefill = memo.get(memo_key)
            if own_prefill is None:
                own_prefill = memo[memo_key] = k.prefill_s(uncached, cached)
            full_prefill = full_prefills.get(k_id)
            if full_prefill is None:
                memo_key = (k_id, prompt, 0)      # own_prefill's key when nothing is cached
                full_prefill = memo.get(memo_key)
                if full_prefill is None:
                    full_prefill = memo[memo_key] = k.prefill_s(prompt, 0)
                full_prefills[k_id] = full_prefill
            answer, per_token = out * sequences, tpot / joined
            gpu_s = own_prefill + answer * per_token
            known[worker_id] = new_tuple(Estimate, (
                ttft, tpot, gpu_s, price_per_s * gpu_s, cached, raw_ttft, raw_tpot,
                ttft if ttft < own_prefill else own_prefill,
                raw_ttft * ttft_upper if ttft_upper else None,
                raw_tpot * tpot_upper if tpot_upper else None,
                ceil(uncached / chunk) if uncached > chunk else 1, full_prefill, regime,
                answer, per_token))

    def candidate_arrays(self, views: Sequence[WorkerView],
                         index: CandidateIndex | None = None) -> CandidateArrays:
        """The views' per-worker constants, rebuilt only when the candidate list changed
        (``index``: the views' ``CandidateIndex``, when at hand)."""
        arrays = self._arrays
        if index is not None and arrays is not None and arrays.index is index:
            return arrays
        infos = index.infos if index is not None else infos_of(views)
        if arrays is None or not arrays.matches(infos):
            arrays = self._arrays = CandidateArrays(
                index if index is not None else CandidateIndex(infos), self.coefficients)
            self._view_terms.clear()     # bounded by the candidates of one list
        elif index is not None:
            arrays.index = index     # the same infos, hence the same ids and positions
        return arrays

    def idle_prefill_s(self, request: RoutingRequest, views: Sequence[WorkerView],
                       arrays: CandidateArrays | None = None) -> float:
        """The prompt's uncached prefill time on the fastest idle candidate (SLO yardstick).

        ``arrays``: the views' ``candidate_arrays``, when already at hand."""
        prompt = max(1, request.num_prompt_tokens)
        distinct = (arrays if arrays is not None else self.candidate_arrays(views)).distinct
        memo = self._prefill_memo
        best = math.inf
        for key, k in distinct.items():
            value = memo[(key, prompt, 0)] = k.prefill_s(prompt)
            if value < best:        # min(best, value), with its tie and NaN rules
                best = value
        return best if distinct else 0.0

    # --- learning --------------------------------------------------------------------------
    def on_routed(self, request: RoutingRequest, view_id: str, gpu_class: str,
                  estimate: Estimate) -> None:
        self.arrivals.add(view_id, request.num_prompt_tokens - estimate.cached_tokens,
                          request.arrival_time)
        self.correction.remember(request.request_id, Prediction(
            view_id, gpu_class, estimate.raw_ttft_s, estimate.raw_tpot_s, estimate.ttft_regime))

    def observe(self, request_id: str, ttft_s: float | None, tpot_s: float | None) -> None:
        self.correction.observe(request_id, ttft_s, tpot_s)


def estimates_for(cycle: CycleState, request: RoutingRequest, workers: Sequence[WorkerView],
                  estimator: TimeEstimator) -> dict[str, Estimate]:
    """This decision's estimates, computed once and shared by every plugin through the cycle.

    Fleets larger than ``SHORTLIST`` are estimated on a shortlist: the workers caching the
    longest prefix, the soonest by a one-line TTFT bound, and the cheapest by that bound
    times price. The others get no estimate (score 0; the picker passes them over).
    """
    known: dict[str, Estimate] | None = cycle.read(ESTIMATES_KEY)
    if known is None:
        known = {}
        cycle.write(ESTIMATES_KEY, known)
        estimator._prefill_memo.clear()
        arrays = estimator.candidate_arrays(workers, candidate_index(cycle, workers))
        cycle.write(IDLE_PREFILL_KEY, estimator.idle_prefill_s(request, workers, arrays))
        match: PrefixMatch | None = cycle.read(MATCH_KEY)
        cached = match.tokens if match is not None else {}
        if len(workers) <= SHORTLIST:
            estimator.estimate_into(known, request, workers, arrays.constants, cached)
        else:
            positions = shortlist_positions(arrays, workers, request.num_prompt_tokens, cached,
                                            SHORTLIST * 3 // 4, SHORTLIST // 4, SHORTLIST // 4)
            constants = arrays.constants
            estimator.estimate_into(known, request, [workers[i] for i in positions],
                                    [constants[i] for i in positions], cached)
    return known
