"""``slo-cost`` picker: the cheapest worker whose estimated TTFT and TPOT meet the SLO.

Reads the estimates the ``estimated-time`` / ``cost`` scorers left in the decision's
``CycleState`` (declare one of them in the same profile). Objectives:

* TTFT ≤ ``max(ttft_s, ttft_idle_prefill_multiple × the prompt's prefill time on the
  fastest idle candidate)``: a long prompt is allowed proportionally longer;
* TPOT ≤ ``tpot_s``.

``ttft_s`` / ``tpot_s`` default to the ``slo:`` section of routing.yaml. The choice:

1. **Within the SLO**: the 90th percentile of a candidate's TTFT and TPOT, learnt online
   from observed/predicted ratios (``policies.latency.online``), meets the objectives. Until
   enough outcomes are known: its estimated wait (TTFT less its own prefill compute, which
   the model prices closely) divided by ``headroom`` plus that compute, and its TPOT
   divided by ``headroom``.
   **Promises kept** (``protect_decodes``): of those, the workers where this prompt's
   prefill leaves every request already decoding there within the TPOT objective
   (``policies.latency.decode_guard``); only when none is left are they all kept. A request
   that meets no SLO anywhere also goes, if it can, where it breaks no other's.
   **Room in the KV cache** (``protect_kv``, off by default): before that, of those within
   the SLO, only the workers whose KV cache is expected to hold this request to its end
   beside what runs there (``_kv_loads``); a worker that runs out of KV blocks preempts
   what it runs, newest first, and recomputes it later. When none has room the request is
   treated as meeting the SLO nowhere, and among the closest to it goes where the KV cache
   has room, or else where it has the most.
   **The cache judged on expectation** (``prefix_on_expected``): a candidate holding more of
   the prompt than every one within the SLO (by more than ``prefix_tolerance``) counts as
   within it when its expected TTFT and TPOT (the corrected estimates, without the 90th
   percentile's or ``headroom``'s margin) meet the objectives. The margin is insurance
   against a late answer; passing over the cache costs this prompt's prefill of what is
   cached and the next turn's hit for certain.
2. **Sticky on the prefix**: keep those whose cached share of the prompt is within
   ``prefix_tolerance`` of the best; affinity is what lets the next turn of a conversation
   hit the cache.
3. **Fast GPUs in reserve** (``reserve_fast``): keep those on the slowest hardware that still
   meets the SLO (the whole prompt's prefill compute there, nothing cached, within 10 % of
   the slowest); a fast GPU is the one resource long prompts cannot do without, so requests
   a slower GPU serves in time leave it free. Hardware only: on one GPU class every sticky
   candidate stays, and the one holding more of the prompt is the cheaper.
4. **Cheapest**: lowest ``estimated_cost_usd``; costs within ``cost_tolerance`` tie, and ties
   go to the highest total score, then the earliest TTFT.

When no candidate meets the SLO, the one closest to it wins (smallest
``max(ttft/objective, tpot/objective)``): the fastest. Without estimates the highest total
wins.

The reason names the deciding term (``prefix``, ``price``, ``load``, ``protect-decodes``
when the guard moved the request off the worker it would otherwise have taken, which the
reason then names as the runner-up, ``protect-kv`` when the KV check did, ``reserve-fast``
when keeping faster GPUs free did, the runner-up then being the faster GPU it would
otherwise have taken, ``only-within-slo`` when the others would miss the SLO,
``only-candidate`` when filters and rules left no other, ``slo-fallback``)::

    prefix 0.82 on a100-1; est ttft 0.21s vs 0.64s on h100-0; cost $0.00040 vs $0.00090

```yaml
slo: {ttft_s: 0.5, tpot_s: 0.05}
profiles:
  default:
    picker:
      type: slo-cost
      params: {ttft_idle_prefill_multiple: 3.0, headroom: 0.8, cost_tolerance: 0.05,
               prefix_tolerance: 0.1, prefix_on_expected: true, reserve_fast: true,
               protect_decodes: true, protect_kv: false}
```
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from policies.base import CandidateScore, CycleState, Decision, RequestOutcome, RoutingRequest
from policies.candidate_index import CANDIDATES_KEY
from policies.candidates import CandidateTable
from policies.cycle_keys import WORKER_ATTRIBUTES, set_reason
from policies.errors import ParamError
from policies.latency.attributes import LazyAttribute, record_attribute
from policies.latency.decode_guard import DecodeGuard
from policies.latency.estimator import ESTIMATES_KEY, IDLE_PREFILL_KEY, Estimate
from policies.registry import BuildContext, PluginRegistry

TYPE_NAME = "slo-cost"


@dataclass(frozen=True, slots=True)
class SloCostParams:
    ttft_s: float | None = None             # None: routing.yaml's slo.ttft_s
    tpot_s: float | None = None             # None: routing.yaml's slo.tpot_s
    ttft_idle_prefill_multiple: float = 3.0
    headroom: float = 0.8
    cost_tolerance: float = 0.05
    prefix_tolerance: float = 0.1
    prefix_on_expected: bool = True
    reserve_fast: bool = True
    protect_decodes: bool = True
    protect_kv: bool = False

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ParamError(name, "must be > 0")
        if self.ttft_idle_prefill_multiple < 0:
            raise ParamError("ttft_idle_prefill_multiple", "must be >= 0")
        if not 0 < self.headroom <= 1.0:
            raise ParamError("headroom", "must be in (0, 1]")
        if self.cost_tolerance < 0:
            raise ParamError("cost_tolerance", "must be >= 0")
        if not 0 <= self.prefix_tolerance <= 1:
            raise ParamError("prefix_tolerance", "must be between 0 and 1")


class SloCostPicker:
    def __init__(self, name: str, params: SloCostParams, ttft_s: float | None,
                 tpot_s: float | None) -> None:
        self.name = name
        self.ttft_s = ttft_s
        self.tpot_s = tpot_s
        self.idle_multiple = params.ttft_idle_prefill_multiple
        self.headroom = params.headroom
        self.tolerance = params.cost_tolerance
        self.prefix_tolerance = params.prefix_tolerance
        self.prefix_on_expected = params.prefix_on_expected
        self.reserve_fast = params.reserve_fast
        self.protect_kv = params.protect_kv
        self.guard = (DecodeGuard(tpot_s) if params.protect_decodes and tpot_s is not None
                      else None)
        self._placed: tuple[str, str, Estimate] | None = None   # the last pick, until routed

    def objectives(self, cycle: CycleState) -> tuple[float, float]:
        idle: float = cycle.read(IDLE_PREFILL_KEY, 0.0)
        ttft = max(self.ttft_s or 0.0, self.idle_multiple * idle)
        return (ttft if ttft > 0 else math.inf,
                self.tpot_s if self.tpot_s is not None else math.inf)

    def pick(self, request: RoutingRequest, candidates: Sequence[CandidateScore],
             cycle: CycleState) -> CandidateScore:
        estimates: Mapping[str, Estimate] | None = cycle.read(ESTIMATES_KEY)
        if not estimates:
            return max(candidates, key=lambda c: c.total)
        ids, totals, at = _columns(candidates)
        # positions with an estimate, in candidate order (a large fleet is estimated on a
        # shortlist); decided on ids and totals so that only the chosen object is built
        positions = _estimated_positions(candidates, ids, estimates)
        if not positions:
            return max(candidates, key=lambda c: c.total)
        ttft_goal, tpot_goal = self.objectives(cycle)
        headroom = self.headroom
        guard = self.guard
        feasible = []
        # padded TTFT and TPOT: the learnt 90th percentile once known; before that the
        # model's own prefill (priced closely) plus its estimated wait, and its TPOT,
        # divided by ``headroom``
        for p in positions:
            e = estimates[ids[p]]
            ttft = e.ttft_upper_s
            if ttft is None:
                ttft = e.prefill_s + (e.ttft_s - e.prefill_s) / headroom
            if ttft <= ttft_goal:
                tpot = e.tpot_upper_s
                if (tpot if tpot is not None else e.tpot_s / headroom) <= tpot_goal:
                    feasible.append(p)
        if self.prefix_on_expected and feasible and len(feasible) < len(positions):
            feasible = self._with_expected_prefix(request, positions, feasible, ids, estimates,
                                                  ttft_goal, tpot_goal)
        overflowing: list[int] = []   # every position within the SLO, when the KV check cut some
        if self.protect_kv and feasible:
            fitting = _with_room(feasible, _kv_loads(request, feasible, ids, estimates, cycle))
            if len(fitting) < len(feasible):
                overflowing, feasible = feasible, fitting
        unguarded: list[int] = []     # every position within the SLO, when the guard cut some
        if guard is not None and feasible:
            kept = guard.fitting(feasible, ids, estimates, request.arrival_time)
            if kept and len(kept) < len(feasible):
                unguarded, feasible = feasible, kept
        # the estimated-time and cost scorers record these from the same estimates; a profile
        # without them still explains the chosen worker's estimates
        recorded = cycle.read(WORKER_ATTRIBUTES) or {}
        if "estimated_cost_usd" not in recorded:
            record_attribute(cycle, "estimated_cost_usd",
                             LazyAttribute(estimates, lambda w: estimates[w].cost_usd))
        if "estimated_ttft_s" not in recorded or "estimated_tpot_s" not in recorded:
            record_attribute(cycle, "estimated_ttft_s",
                             LazyAttribute(estimates, lambda w: estimates[w].ttft_s))
            record_attribute(cycle, "estimated_tpot_s",
                             LazyAttribute(estimates, lambda w: estimates[w].tpot_s))
        runner: int | None
        if feasible:
            chosen, unreserved = self._within_slo(request, feasible, ids, totals, estimates)
            without_guard = (self._within_slo(request, unguarded, ids, totals, estimates)[0]
                             if unguarded else chosen)
            without_kv = (self._within_slo(request, overflowing, ids, totals, estimates)[0]
                          if overflowing else chosen)
            if without_kv != chosen:        # the KV check decided: name the worker it spared
                runner, term = without_kv, "protect-kv"
            elif without_guard != chosen:   # the guard decided: name the worker it spared
                runner, term = without_guard, "protect-decodes"
            elif unreserved != chosen:      # a faster GPU was kept free: name it
                runner, term = unreserved, "reserve-fast"
            else:
                others = [p for p in feasible if p != chosen]
                runner = self._cheapest(others, ids, totals, estimates) if others else None
                term = ("only-candidate" if len(positions) == 1 else _deciding_term(
                    estimates[ids[chosen]],
                    estimates[ids[runner]] if runner is not None else None))
        else:      # the closest to the SLO: least max(ttft / goal, tpot / goal), stable
            if guard is not None:    # a request late anyway should not make others late
                positions = (guard.fitting(positions, ids, estimates, request.arrival_time)
                             or positions)
            if self.protect_kv:     # nor preempt what runs there: the most room if none fits
                loads = _kv_loads(request, positions, ids, estimates, cycle)
                positions = (_with_room(positions, loads)
                             or [positions[loads.index(min(loads))]])
            lateness: list[float] = []
            for e in map(estimates.__getitem__, map(ids.__getitem__, positions)):
                late_ttft, late_tpot = e.ttft_s / ttft_goal, e.tpot_s / tpot_goal
                # max(late_ttft, late_tpot), with its tie and NaN rules, without the call
                lateness.append(late_tpot if late_tpot > late_ttft else late_ttft)
            ranked = sorted(range(len(positions)), key=lateness.__getitem__)
            chosen = positions[ranked[0]]
            runner = positions[ranked[1]] if len(ranked) > 1 else None
            term = "slo-fallback"
            if overflowing:   # within the SLO only where its KV would not hold: name the best
                spared = self._within_slo(request, overflowing, ids, totals, estimates)[0]
                if spared != chosen:
                    runner, term = spared, "protect-kv"
        if guard is not None:
            self._placed = (request.request_id, ids[chosen], estimates[ids[chosen]])
        set_reason(cycle, _reason(request, term, ids[chosen],
                                  ids[runner] if runner is not None else None, estimates),
                   term)
        return at(chosen)

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        placed, self._placed = self._placed, None
        if (self.guard is not None and placed is not None and placed[0] == request.request_id
                and placed[1] == decision.worker_id):
            self.guard.admit(placed[0], placed[1], request.arrival_time, placed[2],
                             request.expected_output_tokens)

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        if self.guard is not None:
            self.guard.complete(outcome.request_id)

    def forget_worker(self, worker_id: str) -> None:
        """The worker's engine restarted, or it left the fleet: its incumbents go."""
        if self.guard is not None:
            self.guard.forget_worker(worker_id)

    def inherit_state(self, previous: object) -> None:
        """Keep the incumbents of the engine this one replaces (a hot reload)."""
        old = getattr(previous, "guard", None)
        if self.guard is not None and isinstance(old, DecodeGuard):
            old.tpot_objective_s = self.guard.tpot_objective_s
            self.guard = old

    def _with_expected_prefix(self, request: RoutingRequest, positions: Sequence[int],
                              feasible: list[int], ids: Sequence[str],
                              estimates: Mapping[str, Estimate], ttft_goal: float,
                              tpot_goal: float) -> list[int]:
        """``feasible`` and, in position order, the candidates outside it that hold more of
        the prompt than every one in it (by more than ``prefix_tolerance``) and whose
        expected TTFT and TPOT meet the objectives."""
        prompt = max(1, request.num_prompt_tokens)
        floor = (max(estimates[ids[p]].cached_tokens for p in feasible)
                 + self.prefix_tolerance * prompt)
        within = set(feasible)
        added = [p for p in positions
                 if p not in within and (e := estimates[ids[p]]).cached_tokens > floor
                 and e.ttft_s <= ttft_goal and e.tpot_s <= tpot_goal]
        return sorted(feasible + added) if added else feasible

    def _within_slo(self, request: RoutingRequest, feasible: Sequence[int], ids: Sequence[str],
                    totals: Sequence[float], estimates: Mapping[str, Estimate]
                    ) -> tuple[int, int]:
        """Of the positions within the SLO: sticky on the prefix, fast GPUs in reserve, then
        the cheapest. Returns the choice and the one without the reserve (the same position
        when the reserve left every sticky candidate)."""
        sticky = self._longest_prefix(request, feasible, ids, estimates)
        if self.reserve_fast:    # by hardware speed: what each has cached must not count
            speed = [_hardware_prefill_s(estimates[ids[p]]) for p in sticky]
            slowest = max(speed)
            reserved = [p for p, s in zip(sticky, speed, strict=True) if s >= 0.9 * slowest]
            if len(reserved) < len(sticky):
                return (self._cheapest(reserved, ids, totals, estimates),
                        self._cheapest(sticky, ids, totals, estimates))
        chosen = self._cheapest(sticky, ids, totals, estimates)
        return chosen, chosen

    def _longest_prefix(self, request: RoutingRequest, group: Sequence[int],
                        ids: Sequence[str], estimates: Mapping[str, Estimate]) -> list[int]:
        """Positions whose cached share is within ``prefix_tolerance`` of the best one."""
        prompt = max(1, request.num_prompt_tokens)
        best = max(estimates[ids[p]].cached_tokens for p in group) / prompt
        floor = best - self.prefix_tolerance
        return [p for p in group if estimates[ids[p]].cached_tokens / prompt >= floor]

    def _cheapest(self, group: Sequence[int], ids: Sequence[str], totals: Sequence[float],
                  estimates: Mapping[str, Estimate]) -> int:
        cheapest = min(estimates[ids[p]].cost_usd for p in group)
        near = [p for p in group
                if estimates[ids[p]].cost_usd <= cheapest * (1.0 + self.tolerance)]
        return max(near, key=lambda p: (totals[p], -estimates[ids[p]].ttft_s))


def _columns(candidates: Sequence[CandidateScore]) -> tuple[
        Sequence[str], Sequence[float], Callable[[int], CandidateScore]]:
    """Ids, totals and the candidate at a position; from the engine's column table without
    building a candidate object per worker."""
    if isinstance(candidates, CandidateTable):
        return candidates.ids, candidates.totals, candidates.at
    return ([c.worker_id for c in candidates], [c.total for c in candidates],
            candidates.__getitem__)


def _estimated_positions(candidates: Sequence[CandidateScore], ids: Sequence[str],
                         estimates: Mapping[str, Estimate]) -> list[int]:
    """Positions in ``ids`` of the workers with an estimate, ascending. From the table's
    id -> position map when it has one (O(estimates), not O(candidates))."""
    if isinstance(candidates, CandidateTable):
        position = candidates.positions()
        if len(position) == len(ids):      # no id repeats: one position per estimate
            if estimates.keys() <= position.keys():
                if len(estimates) == len(ids):     # every candidate (a fleet of 32 or fewer)
                    return list(range(len(ids)))
                return sorted(map(position.__getitem__, estimates))
            return sorted(position[w] for w in estimates if w in position)
    return [p for p, worker_id in enumerate(ids) if worker_id in estimates]


def _with_room(positions: Sequence[int], loads: Sequence[float]) -> list[int]:
    """The positions whose KV load (``_kv_loads``) fits their cache."""
    return [p for p, load in zip(positions, loads, strict=True) if load <= 1.0]


def _kv_loads(request: RoutingRequest, positions: Sequence[int], ids: Sequence[str],
              estimates: Mapping[str, Estimate], cycle: CycleState) -> list[float]:
    """Per position, the KV tokens its worker is expected to hold at this request's end,
    over its cache's size: what it holds now (``kv_usage``), the prefill the router has sent
    and not yet seen start, this request's uncached prompt and its output, and what the
    sequences decoding there add meanwhile: one token per step each, for as many steps as
    this request's output or their own mean remaining output, whichever is fewer (the
    router's in-flight requests there, taken as half done). Requests that end meanwhile
    are not subtracted: an upper bound while they last. 0 where the cache size is unknown.
    """
    entry = cycle.read(CANDIDATES_KEY)
    if entry is None:
        return [0.0] * len(positions)
    views = entry[0]
    output = request.expected_output_tokens
    prompt = request.num_prompt_tokens
    loads = []
    for p in positions:
        v = views[p]
        capacity = v.num_gpu_blocks * v.block_size
        if capacity <= 0:
            loads.append(0.0)
            continue
        decoding = v.running if v.running > 0 else 0
        pending = v.inflight_tokens - v.inflight_prefill_tokens
        mean_left = pending / v.inflight_requests / 2.0 if v.inflight_requests > 0 else 0.0
        growth = decoding * min(output, mean_left)
        need = (v.kv_usage * capacity + v.inflight_prefill_tokens
                + prompt - estimates[ids[p]].cached_tokens + output + growth)
        loads.append(need / capacity)
    return loads


def _hardware_prefill_s(estimate: Estimate) -> float:
    """The whole prompt's prefill compute on the candidate's GPU with nothing cached (its
    own prefill when the estimate does not carry that): comparing own prefills would take
    a worker holding more of the prompt for faster hardware and pass it over."""
    full = estimate.full_prefill_s
    return full if full is not None else estimate.prefill_s


def _deciding_term(chosen: Estimate, runner: Estimate | None) -> str:
    if runner is None:
        return "only-within-slo"
    if chosen.cached_tokens > runner.cached_tokens:
        return "prefix"
    if chosen.cost_usd < runner.cost_usd and chosen.gpu_s >= runner.gpu_s:
        return "price"
    return "load"


def _reason(request: RoutingRequest, term: str, chosen_id: str, runner_id: str | None,
            estimates: Mapping[str, Estimate]) -> str:
    mine = estimates[chosen_id]
    share = mine.cached_tokens / max(1, request.num_prompt_tokens)
    head = f"{term}: prefix {share:.2f} on {chosen_id}"
    if runner_id is None:
        return (f"{head}; est ttft {mine.ttft_s:.2f}s; tpot {mine.tpot_s * 1e3:.0f}ms; "
                f"cost {_dollars(mine.cost_usd)}")
    other = estimates[runner_id]
    return (f"{head}; est ttft {mine.ttft_s:.2f}s vs {other.ttft_s:.2f}s on "
            f"{runner_id}; tpot {mine.tpot_s * 1e3:.0f}ms vs {other.tpot_s * 1e3:.0f}ms; "
            f"cost {_dollars(mine.cost_usd)} vs {_dollars(other.cost_usd)}")


def _dollars(value: float) -> str:
    """A request's cost for the reason: four decimals from $0.001 up, two significant digits
    below (a short request costs millionths, and "price" must not show $0.0000 twice)."""
    if not 0.0 < value < 0.001:
        return f"${value:.4f}"
    return f"${value:.{1 - math.floor(math.log10(value))}f}"


def build_slo_cost(params: SloCostParams, context: BuildContext) -> SloCostPicker:
    slo = context.routing.slo
    return SloCostPicker(context.name, params,
                         params.ttft_s if params.ttft_s is not None else slo.ttft_s,
                         params.tpot_s if params.tpot_s is not None else slo.tpot_s)


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "picker", SloCostParams, build_slo_cost,
                      needs=("num_prompt_tokens", "predicted_output_tokens"))
