"""The discrete-event loop: a trace replayed through one policy on a virtual fleet.

Events, in virtual seconds from the first arrival:

* **scrape** every ``scrape_interval_s`` (the router's default): each worker's snapshot is
  rebuilt from its engine's gauges and the in-flight tracker's ``on_scrape`` runs, exactly
  as the live scraper does;
* **arrival**: the request gets its prompt token ids from the trace (so no producer
  re-tokenizes), the policy's producers run inline, views come from ``build_view`` (last
  snapshot + ``InflightTracker``) and ``PolicyEngine.decide`` picks a worker;
* **worker steps**: before every event each engine is stepped up to the event's time, and the
  outputs of the steps that ended meanwhile update the tracker (first token, completion)
  and the policy's observers (``on_completed``).

With ``kv_events`` on, every engine publishes KV events as a live vLLM does, and they reach an
``ExactPrefixIndex`` attached to the policy's prefix plugins when the steps that made them
end, as the router's subscriber feeds it (``router/kv_event_feed.py``). The engines then
hash blocks with the policy's ``blocks`` producer algorithm and seed, as workers and router
must agree live. Without it the prefix plugins know only their routing history.

A request the policy finds no worker for, or that exceeds the chosen worker's context or KV
cache, is rejected and recorded as such.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from policies.base import Decision, RequestOutcome, RoutingRequest
from policies.engine import PolicyEngine
from policies.producers.blocks import BlocksProducer
from policies.producers.runner import run_producers_sync
from policies.producers.tokens import TokensProducer
from policies.semantic.producer import SemanticProducer
from sim.client_max_tokens import EXACT, ClientMaxTokens
from sim.metrics import RequestRecord, WorkerUsage, allocate_costs
from sim.prefill_clock import PrefillClock
from sim.slo import DEFAULT_SLO, Slo
from sim.traces import Trace, TraceRequest
from sim.worker import FirstToken, KvEventsLanding, SimWorker
from workers.engine.api import EngineConfig, EngineRequest, RequestStats
from workers.engine.capacity import EngineLimits, config_limits
from workers.engine.core import EngineCore
from workers.engine.request import Request
from workers.fleet import FleetConfig, FleetConfigError
from workers.inflight import InflightTracker
from workers.kv_events.exact_index import ExactPrefixIndex
from workers.kv_events.wiring import attach
from workers.models import WorkerInfo, WorkerView
from workers.views import build_view

DEFAULT_HASH_ALGO = "builtin"      # in-process only; ~10x cheaper than vLLM's sha256


def router_scrape_interval() -> float:
    """The live router's default scrape interval, so both see equally stale snapshots."""
    from router.settings import Settings
    default = Settings.__dataclass_fields__["scrape_interval_s"].default
    return float(default) if isinstance(default, int | float) else 0.2


@dataclass(frozen=True, slots=True)
class SimulationSettings:
    scrape_interval_s: float = 0.2
    hash_algo: str = DEFAULT_HASH_ALGO
    seed: int = 0
    num_gpu_blocks: int | None = None      # None: derived from each GPU's memory
    kv_events: bool = False                # engines publish KV events to the policy
    hash_seed: str | None = None           # the engines' NONE_HASH seed (vLLM's default)
    # what clients send as max_tokens (the answers stay the trace's): sim.client_max_tokens
    client_max_tokens: ClientMaxTokens = EXACT
    slo: Slo = DEFAULT_SLO                 # what each request's record is judged by


@dataclass(slots=True)
class _Dispatched:
    routing: RoutingRequest
    record: RequestRecord
    worker: SimWorker
    prefill_estimate: int
    first_token_seen: bool = False


@dataclass(frozen=True, slots=True)
class DecisionPoint:
    """The inputs and output of one decision, for inspection and tests."""

    now: float
    request: RoutingRequest
    views: tuple[WorkerView, ...]
    decision: Decision


@dataclass(slots=True)
class SimulationResult:
    records: list[RequestRecord]
    usage: list[WorkerUsage]


def fleet_kv_tokens(fleet: FleetConfig, settings: SimulationSettings | None = None) -> int:
    """Prompt tokens the KV caches of the workers serving the simulated model hold
    (``simulated_model``: all of them in a fleet of one model), as the simulated engines size
    them; ``FleetConfigError`` naming the file and worker when one has no room for a KV
    cache."""
    settings = settings or SimulationSettings()
    model = simulated_model(fleet)
    total = 0
    for i, spec in enumerate(fleet.workers):
        try:
            limits = config_limits(engine_config(spec.info, settings, i, spec.emulate))
        except ValueError as exc:
            raise FleetConfigError(f"{fleet.source}: workers[{i}] ({spec.info.id}): "
                                   f"{exc}") from None
        if model in spec.info.models:
            total += limits.num_gpu_blocks * limits.block_size
    return total


def simulated_model(fleet: FleetConfig) -> str:
    """The model every simulated request asks for: the first worker's first model."""
    return fleet.workers[0].info.models[0] if fleet.workers else ""


# the keys of a worker's ``emulate:`` block that size its engine, taken as ``kvroute up``
# takes them (the fleet file checked their values)
EMULATED_ENGINE_KEYS = ("block_size", "num_gpu_blocks", "gpu_memory_utilization",
                        "max_model_len", "enable_prefix_caching", "scheduler_reserve_full_isl")


def _model_limits(fleet: FleetConfig, settings: SimulationSettings) -> list[EngineLimits]:
    """The sizes of the simulated engines of the workers serving the simulated model."""
    model = simulated_model(fleet)
    return [config_limits(engine_config(spec.info, settings, i, spec.emulate))
            for i, spec in enumerate(fleet.workers) if model in spec.info.models]


def largest_window(fleet: FleetConfig, settings: SimulationSettings | None = None) -> int:
    """The largest ``max_model_len`` among the workers serving the simulated model, as the
    simulated engines size them (0 when none serves it)."""
    limits = _model_limits(fleet, settings or SimulationSettings())
    return max((k.max_model_len for k in limits), default=0)


def servable(trace: Trace, fleet: FleetConfig,
             settings: SimulationSettings | None = None) -> Trace:
    """``trace`` without the requests no worker of ``fleet`` can ever serve (longer than every
    worker's window or KV cache, as ``SimWorker.fits`` judges): every policy rejects them, and
    the hit rates count served requests only, so the prefix ceilings leave them out too."""
    limits = _model_limits(fleet, settings or SimulationSettings())

    def fits_somewhere(request: TraceRequest) -> bool:
        prompt, total = request.num_prompt_tokens, request.num_prompt_tokens + (
            request.output_tokens)
        return any(prompt < k.max_model_len and total <= k.max_model_len
                   and total <= k.num_gpu_blocks * k.block_size for k in limits)

    kept = tuple(r for r in trace.requests if fits_somewhere(r))
    return trace if len(kept) == len(trace.requests) else replace(trace, requests=kept)


def engine_config(info: WorkerInfo, settings: SimulationSettings, index: int,
                  emulate: Mapping[str, Any] | None = None) -> EngineConfig:
    """The engine configuration of the fleet's ``index``-th worker in a simulation (its
    ``emulate:`` block's KV-cache settings applied; ``settings.num_gpu_blocks`` wins)."""
    sized = {key: emulate[key] for key in EMULATED_ENGINE_KEYS
             if emulate is not None and emulate.get(key) is not None}
    if settings.num_gpu_blocks is not None:
        sized["num_gpu_blocks"] = settings.num_gpu_blocks
    return EngineConfig(model=info.model_spec, gpu=info.gpu,
                        tensor_parallel=info.tensor_parallel, hash_algo=settings.hash_algo,
                        hash_seed=settings.hash_seed, enable_kv_events=settings.kv_events,
                        seed=settings.seed + index, max_num_seqs=info.max_num_seqs,
                        max_num_batched_tokens=info.max_num_batched_tokens, **sized)


def kv_event_settings(settings: SimulationSettings, policy: PolicyEngine) -> SimulationSettings:
    """``settings`` for ``policy``: with KV events on, the engines hash blocks as the policy's
    ``blocks`` producer does (else the exact index could never match); a policy without one
    has no use for events, which are then left off."""
    if not settings.kv_events:
        return settings
    producer = next((p for p in policy.producers if isinstance(p, BlocksProducer)), None)
    if producer is None:
        return replace(settings, kv_events=False)
    return replace(settings, hash_algo=producer.algo, hash_seed=producer.seed)


def build_workers(fleet: FleetConfig, settings: SimulationSettings) -> list[SimWorker]:
    return [SimWorker(spec.info, EngineCore(engine_config(spec.info, settings, i, spec.emulate)),
                      spec.emulated_adapters, spec.emulated_adapter_paths)
            for i, spec in enumerate(fleet.workers)]


class Simulation:
    """One replay of ``trace`` through ``policy`` on ``fleet``. Call ``run()`` once."""

    def __init__(self, trace: Trace, fleet: FleetConfig, policy: PolicyEngine,
                 settings: SimulationSettings | None = None,
                 on_arrival: Callable[[int], None] | None = None,
                 prefill_clock: PrefillClock | None = None,
                 on_decision: Callable[[DecisionPoint], None] | None = None) -> None:
        self.trace = trace
        self.policy = policy
        self.settings = settings = kv_event_settings(settings or SimulationSettings(), policy)
        self.exact_index: ExactPrefixIndex | None = None
        if settings.kv_events:
            self.exact_index = ExactPrefixIndex()
            attach(policy, self.exact_index)
        self.workers = build_workers(fleet, settings)
        self._by_id = {w.info.id: w for w in self.workers}
        self.tracker = InflightTracker()
        self._model = simulated_model(fleet)
        self._prefill = prefill_clock or PrefillClock(fleet.workers[0].info.model_spec)
        self._on_arrival = on_arrival
        self._on_decision = on_decision
        # Trace requests arrive with their token ids: the tokens producer would only copy
        # them (scanning every id), so it is left out; every other producer runs as live.
        self._producers = [p for p in policy.producers if not isinstance(p, TokensProducer)]
        # a semantic producer classifies the prompt's text, where the trace has it; only
        # then is the text the request's prompt (the peers read ``prompt``: they see tokens)
        self._classifies = any(isinstance(p, SemanticProducer) for p in self._producers)
        self._live: dict[str, _Dispatched] = {}
        self._records: list[RequestRecord] = []
        self._landings: list[tuple[float, int, int,
                                   FirstToken | RequestStats | KvEventsLanding]] = []
        self._sequence = 0

    def run(self) -> SimulationResult:
        interval = self.settings.scrape_interval_s
        next_scrape = 0.0
        for request in self.trace.requests:
            while next_scrape <= request.arrival_s:
                self._advance_all(next_scrape)
                self._scrape_all(next_scrape)
                next_scrape += interval
            self._advance_all(request.arrival_s)
            self._arrive(request)
            if self._on_arrival is not None:
                self._on_arrival(1)
        self._advance_all(float("inf"))
        usage = [WorkerUsage(w.info.id, w.info.gpu.name, w.info.price_per_hour, w.busy_s)
                 for w in self.workers]
        allocate_costs(self._records, usage)
        return SimulationResult(records=self._records, usage=usage)

    def _advance_all(self, t: float) -> None:
        """Step every engine up to ``t``, then apply what became visible by ``t`` in order."""
        heap = self._landings
        for index, worker in enumerate(self.workers):
            for at, item in worker.advance_to(t):
                self._sequence += 1
                heapq.heappush(heap, (at, self._sequence, index, item))
        while heap and heap[0][0] <= t:
            _, _, index, item = heapq.heappop(heap)
            if isinstance(item, FirstToken):
                self._first_token(self.workers[index], item.request_id)
            elif isinstance(item, KvEventsLanding):
                if self.exact_index is not None:
                    self.exact_index.apply_events(item.worker_id, item.events)
            else:
                self._finish(item)

    def _scrape_all(self, now: float) -> None:
        for worker in self.workers:
            worker.scrape(now)
            self.tracker.on_scrape(worker.info.id)

    def views(self, now: float) -> list[WorkerView]:
        return [build_view(w.info, w.snapshot, self.tracker.get(w.info.id), now)
                for w in self.workers]

    def _arrive(self, request: TraceRequest) -> None:
        now = request.arrival_s
        tokens = self.trace.prompt_token_ids(request)
        routing = RoutingRequest(
            request_id=f"trace-{request.index}", model=self._model, path="/v1/completions",
            prompt=request.text if self._classifies and request.text is not None else tokens,
            max_tokens=self.settings.client_max_tokens.for_output(request.output_tokens),
            tenant=request.tenant,
            session=request.session, arrival_time=now)
        routing.prompt_token_ids = tokens
        routing.num_prompt_tokens = len(tokens)
        slo = self.settings.slo
        record = RequestRecord(
            index=request.index, arrival_s=now, prompt_tokens=len(tokens),
            output_tokens=request.output_tokens,
            slo_ttft_s=(slo.ttft_target(self._prefill.prefill_s(len(tokens))) if slo.relative
                        else slo.ttft_target(0.0)),
            slo=slo)
        self._records.append(record)
        views = self.views(now)
        self.policy.name_alias_target(routing)        # as the router does before them
        run_producers_sync(self._producers, routing, views)
        record.predicted_output_tokens = routing.predicted_output_tokens
        decision = self.policy.decide(routing, views)
        if self._on_decision is not None:
            self._on_decision(DecisionPoint(now, routing, tuple(views), decision))
        record.reason = decision.reason
        skipped = decision.attributes.get("skipped_plugins")
        if isinstance(skipped, tuple) and skipped:
            record.skipped_plugins = tuple(map(str, skipped))
        decided_by = decision.attributes.get("decided_by")
        record.decided_by = decided_by if isinstance(decided_by, str) else ""
        worker = self._by_id.get(decision.worker_id) if decision.worker_id else None
        if worker is None:
            record.reject_reason = decision.reason or "no candidate"
            return
        unfit = worker.fits(len(tokens), request.output_tokens)
        if unfit is not None:
            record.reject_reason = f"{worker.info.id}: {unfit}"
            return
        record.worker_id = worker.info.id
        record.cached_here_tokens, record.cached_anywhere_tokens = self._cached_prefix(
            tokens, worker)
        # the same accounting as router.director: estimate, dispatch, then observers
        matched = decision.attributes.get("prefix_match_tokens")
        estimate = max(0, routing.num_prompt_tokens - (matched if isinstance(matched, int) else 0))
        self.tracker.on_dispatch(worker.info.id, estimate, routing.expected_output_tokens)
        self.policy.on_routed(routing, decision)
        self._live[routing.request_id] = _Dispatched(routing, record, worker, estimate)
        # an adapter's request, as the emulator serves it: its blocks hashed with its key
        lora = next(((name, path) for name, path in worker.lora_paths
                     if name == decision.model), None)
        worker.submit(EngineRequest(
            request_id=routing.request_id, prompt_token_ids=tokens,
            output_token_ids=self.trace.output_token_ids(request), arrival_time=now,
            lora_name=lora[0] if lora else None, lora_path=lora[1] if lora else None), now)

    def _cached_prefix(self, tokens: list[int], chosen: SimWorker) -> tuple[int, int]:
        """The longest prefix of ``tokens`` cached now on ``chosen`` and on any worker. The
        engines hash alike but for their block size, so one probe per block size serves."""
        probes: dict[int, Request] = {}
        here = anywhere = 0
        for worker in self.workers:
            engine = worker.engine
            probe = probes.get(engine.block_size)
            if probe is None:
                probe = probes[engine.block_size] = engine.prefix_probe(tokens)
            cached = engine.cached_prefix_tokens(probe)
            anywhere = max(anywhere, cached)
            if worker is chosen:
                here = cached
        return here, anywhere

    def _first_token(self, worker: SimWorker, request_id: str) -> None:
        entry = self._live.get(request_id)
        if entry is not None and not entry.first_token_seen:
            entry.first_token_seen = True
            self.tracker.on_first_token(worker.info.id, entry.prefill_estimate)

    def _finish(self, stats: RequestStats) -> None:
        entry = self._live.pop(stats.request_id, None)
        if entry is None:
            return
        record = entry.record
        record.ttft_s = stats.first_token_time - record.arrival_s
        record.e2e_s = stats.finished_time - record.arrival_s
        record.queue_s = stats.first_scheduled_time - record.arrival_s
        record.finished_s = stats.finished_time
        record.cached_tokens = stats.num_cached_tokens
        record.preemptions = stats.num_preemptions
        record.output_tokens = stats.num_generation_tokens
        if stats.num_generation_tokens > 1:
            record.tpot_s = ((stats.finished_time - stats.first_token_time)
                             / (stats.num_generation_tokens - 1))
        self.tracker.on_complete(entry.worker.info.id,
                                 0 if entry.first_token_seen else entry.prefill_estimate,
                                 entry.routing.expected_output_tokens)
        self.policy.on_completed(entry.routing, RequestOutcome(
            request_id=stats.request_id, worker_id=entry.worker.info.id, status=200,
            prompt_tokens=record.prompt_tokens, completion_tokens=record.output_tokens,
            cached_tokens=record.cached_tokens, ttft_s=record.ttft_s, tpot_s=record.tpot_s,
            e2e_s=record.e2e_s))

