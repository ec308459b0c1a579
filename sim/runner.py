"""Runs one policy's simulations for ``kvroute sim``: the main run, and the goodput search.

A ``PolicyJob`` is picklable so that several policies can run in parallel processes; each
job loads the trace and fleet itself and builds a fresh ``PolicyEngine`` for every
simulation (plugins keep cross-request state).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.engine import PolicyEngine
from sim.cache_curve import prefix_ceiling
from sim.client_max_tokens import EXACT, ClientMaxTokens
from sim.goodput import GoodputSearch, find_goodput
from sim.metrics import RequestRecord, attainment, summarize, ttft_values
from sim.offered import OfferedLoad
from sim.policy_names import resolve_policy
from sim.prefill_clock import PrefillClock
from sim.simulator import Simulation, SimulationSettings, engine_config, servable
from sim.slo import DEFAULT_SLO, Slo
from sim.traces import Trace, TraceFormat, load_trace, rescale
from workers.engine.capacity import config_limits
from workers.fleet import FleetConfig, load_fleet

Progress = Callable[[str, int], None]      # ("done", n requests) or ("total", n more)


@dataclass(frozen=True, slots=True)
class PolicyJob:
    policy: str
    trace_path: str
    fleet_path: str
    trace_format: TraceFormat = "auto"
    limit: int | None = None
    duration_s: float | None = None
    skip: int = 0
    rate_scale: float = 1.0
    seed: int = 0
    scrape_interval_s: float = 0.2
    goodput: bool = False
    jitter_s: float = 0.0
    kv_events: bool = False
    client_max_tokens: ClientMaxTokens = EXACT
    slo: Slo = DEFAULT_SLO


@dataclass(slots=True)
class PolicyRun:
    policy: str
    summary: dict[str, Any]
    ttfts: list[float]
    records: list[RequestRecord]
    wall_s: float


def load_job_trace(job: PolicyJob) -> Trace:
    """The job's trace sliced on its own clock, at rate scale 1."""
    return load_trace(job.trace_path, fmt=job.trace_format, limit=job.limit,
                      duration_s=job.duration_s, seed=job.seed, jitter_s=job.jitter_s,
                      skip=job.skip)


def run_policy(job: PolicyJob, progress: Progress | None = None,
               ceiling: float | None = None, trace: Trace | None = None) -> PolicyRun:
    """Simulate ``job``; ``trace``: its trace already loaded (``load_job_trace(job)``), which
    is otherwise read again (seconds for a trace of a million rows)."""
    started = time.perf_counter()
    base = trace if trace is not None else load_job_trace(job)
    fleet = load_fleet(job.fleet_path)
    routing = resolve_policy(job.policy)
    settings = SimulationSettings(scrape_interval_s=job.scrape_interval_s, seed=job.seed,
                                  kv_events=job.kv_events,
                                  client_max_tokens=job.client_max_tokens, slo=job.slo)
    clock = PrefillClock(fleet.workers[0].info.model_spec)
    if ceiling is None:
        ceiling = prefix_ceiling(servable(base, fleet))

    def simulate(scale: float) -> tuple[dict[str, Any], list[RequestRecord]]:
        policy = PolicyEngine.build(routing, fleet, seed=job.seed)
        tick = (lambda n: progress("done", n)) if progress is not None else None
        result = Simulation(rescale(base, scale), fleet, policy, settings, tick, clock).run()
        return summarize(job.policy, result.records, result.usage, ceiling, scale), \
            result.records

    summary, records = simulate(job.rate_scale)
    if job.goodput:
        probed = {job.rate_scale: summary}

        def attainment_at(scale: float) -> float:
            if scale not in probed:
                if progress is not None:
                    progress("total", len(base.requests))
                probed[scale] = simulate(scale)[0]
            return attainment(probed[scale])
        search = find_goodput(attainment_at, job.rate_scale, target=job.slo.attainment)
        summary.update(goodput_fields(search, probed, OfferedLoad.of(base)))
    wall = time.perf_counter() - started
    summary["sim_wall_s"] = wall
    return PolicyRun(job.policy, summary, ttft_values(records), records, wall)


def goodput_fields(search: GoodputSearch, probed: Mapping[float, Mapping[str, Any]],
                   offered: OfferedLoad) -> dict[str, Any]:
    """A policy's ``summary.json`` keys of a goodput search; ``probed``: the summary of the
    simulation at each scale probed, ``offered``: the slice's load at rate scale 1."""
    at_goodput = probed.get(search.rate_scale, {})
    return {
        "goodput_rate_scale": search.rate_scale,
        "goodput_capped": search.capped,     # a lower bound: the search's last scale
        "goodput_probes": [[s, a] for s, a in search.probes],
        # the price of a token when running as fast as the SLO allows: the same attainment
        # (the goodput target) for every policy, each at its own rate; busy-only, and the
        # whole fleet billed (its $/h over the tokens per hour served at that scale)
        "goodput_cost_per_mtok_busy": at_goodput.get("cost_per_mtok_busy"),
        "goodput_cost_per_mtok_fleet": at_goodput.get("cost_per_mtok_fleet"),
        # the goodput as an absolute rate: the slice's offered rate at scale 1 times it
        "goodput_rps": offered.requests_at(search.rate_scale),
        "goodput_prompt_tok_s": offered.prompt_tokens_at(search.rate_scale),
        # why no scale passed (plateau: not met even near idle; limit: halvings ran out)
        "goodput_floor": search.floor,
        "idle_attainment": search.idle_attainment,
    }


def fleet_meta(fleet: FleetConfig) -> dict[str, Any]:
    """``summary.json``'s ``fleet``: each worker's ``max_model_len`` is its engine's (the
    ``emulate:`` block's, where it sets one, at most what the KV cache holds)."""
    settings = SimulationSettings()
    return {
        "source": fleet.source,
        "price_per_hour": sum(w.info.price_per_hour for w in fleet.workers),
        "workers": [{"id": w.info.id, "gpu": w.info.gpu.name,
                     "price_per_hour": w.info.price_per_hour,
                     "max_model_len": config_limits(
                         engine_config(w.info, settings, i, w.emulate)).max_model_len}
                    for i, w in enumerate(fleet.workers)],
    }


def trace_meta(job: PolicyJob, trace: Trace, ceiling: float,
               pooled_ceiling: float | None = None) -> dict[str, Any]:
    offered = OfferedLoad.of(trace)
    return {"name": Path(job.trace_path).name, "path": job.trace_path,
            "requests": len(trace.requests), "span_s": trace.span_s,
            "rate_scale": job.rate_scale, "skip": job.skip, "limit": job.limit,
            "duration_s": job.duration_s,
            "jitter_s": job.jitter_s,
            "seed": job.seed, "prefix_hit_ceiling": ceiling,
            "prefix_hit_ceiling_pooled": pooled_ceiling,
            "prompt_tokens": sum(r.num_prompt_tokens for r in trace.requests),
            "output_tokens": sum(r.output_tokens for r in trace.requests),
            # requests / span_s x rate_scale: what the run offered (span_s is unscaled)
            "offered_rps": offered.requests_at(job.rate_scale),
            "offered_prompt_tok_s": offered.prompt_tokens_at(job.rate_scale)}
