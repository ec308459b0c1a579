"""Measure what a routing configuration costs per request: producers and decision time.

``kvroute validate FILE --fleet F --time-decisions N [--workers W]`` builds the engine,
makes ``W`` healthy worker views from the fleet (its workers repeated with numbered ids,
loads drawn from a seeded generator) and times ``N`` requests with distinct chat prompts
(so the token cache misses): the producers (inline) and ``decide`` separately, in wall time,
and ``decide`` also in CPU time of the thread (which other processes on a busy machine do
not inflate).
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from policies.base import RoutingRequest
from policies.engine import PolicyEngine
from policies.producers.runner import run_producers_sync
from workers.fleet import FleetConfig
from workers.models import WorkerView

_WORDS = ("route", "token", "cache", "worker", "prefix", "latency", "batch", "model", "queue",
          "decode", "prefill", "block", "kernel", "memory", "tensor", "request")


@dataclass(frozen=True, slots=True)
class Timing:
    requests: int
    workers: int
    prompt_tokens_mean: float
    produce_p50_us: float
    produce_p99_us: float
    decide_p50_us: float
    decide_p99_us: float
    decide_cpu_p50_us: float
    decide_cpu_p99_us: float
    # plugins skipped for failing (raised, or returned what their kind must not): how many
    # of the decisions each (producers included)
    skipped: Mapping[str, int] = field(default_factory=dict)

    def line(self) -> str:
        return (f"{self.requests} requests x {self.workers} workers "
                f"(mean prompt {self.prompt_tokens_mean:.0f} tokens): producers p50 "
                f"{self.produce_p50_us:.1f} us p99 {self.produce_p99_us:.1f} us; decide p50 "
                f"{self.decide_p50_us:.1f} us p99 {self.decide_p99_us:.1f} us; decide CPU p50 "
                f"{self.decide_cpu_p50_us:.1f} us p99 {self.decide_cpu_p99_us:.1f} us")


def synthetic_views(fleet: FleetConfig, count: int, rng: random.Random) -> list[WorkerView]:
    infos = [spec.info for spec in fleet.workers]
    views: list[WorkerView] = []
    for i in range(count):
        base = infos[i % len(infos)]
        info = base if count <= len(infos) else dataclasses.replace(
            base, id=f"{base.id}-{i}", labels=MappingProxyType(dict(base.labels)))
        views.append(WorkerView(
            info=info, running=rng.randint(0, 32), waiting=rng.randint(0, 8),
            kv_usage=rng.random(), block_size=16, num_gpu_blocks=20000,
            max_model_len=info.model_spec.max_model_len,
            inflight_requests=rng.randint(0, 40), inflight_tokens=rng.randint(0, 40000),
            healthy=True, staleness_s=rng.random(), served_models=info.models))
    return views


def time_decisions(engine: PolicyEngine, fleet: FleetConfig, requests: int, workers: int,
                   seed: int = 0) -> Timing:
    rng = random.Random(seed)
    views = synthetic_views(fleet, workers, rng)
    model = fleet.workers[0].info.models[0]
    produce_ns: list[int] = []
    decide_ns: list[int] = []
    decide_cpu_ns: list[int] = []
    skipped: Counter[str] = Counter()
    tokens = 0
    for i in range(requests):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(20, 400)))
        request = RoutingRequest(f"t{i}", model, messages=[
            {"role": "user", "content": f"{i}: {words}"}], max_tokens=rng.randint(16, 512))
        start = time.perf_counter_ns()
        engine.name_alias_target(request)             # as the router does before them
        run_producers_sync(engine.producers, request, views)
        middle = time.perf_counter_ns()
        cpu_start = time.thread_time_ns()
        decision = engine.decide(request, views)
        cpu_end = time.thread_time_ns()
        end = time.perf_counter_ns()
        if decision.worker_id is not None:
            engine.on_routed(request, decision)
        failed = decision.attributes.get("skipped_plugins")
        if isinstance(failed, (tuple, list)):
            skipped.update(map(str, failed))
        produce_ns.append(middle - start)
        decide_ns.append(end - middle)
        decide_cpu_ns.append(cpu_end - cpu_start)
        tokens += request.num_prompt_tokens
    return Timing(requests, len(views), tokens / max(requests, 1),
                  _pct(produce_ns, 50), _pct(produce_ns, 99),
                  _pct(decide_ns, 50), _pct(decide_ns, 99),
                  _pct(decide_cpu_ns, 50), _pct(decide_cpu_ns, 99), dict(skipped))


def _pct(samples_ns: list[int], pct: int) -> float:
    if len(samples_ns) < 2:
        return samples_ns[0] / 1000 if samples_ns else 0.0
    return statistics.quantiles(samples_ns, n=100, method="inclusive")[pct - 1] / 1000
