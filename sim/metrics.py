"""Per-request records of a simulated run and the per-policy summary computed from them.

The summary's fields are the schema of ``summary.json`` (documented in ``docs/sim.md``):
latency percentiles (numpy linear interpolation, seconds), SLO attainment, prefix hit rate
beside the trace's infinite-cache ceiling, cost per million tokens (whole fleet billed over
the makespan, and each worker billed only while it has work) and token throughput.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.slo import (
    DEFAULT_SLO,
    GOODPUT_ATTAINMENT,
    SLO_TPOT_S,
    SLO_TTFT_FLOOR_S,
    SLO_TTFT_PREFILL_FACTOR,
    Slo,
)


@dataclass(slots=True)
class RequestRecord:
    """What happened to one trace request. Latencies are ``None`` for rejected requests."""

    index: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    slo_ttft_s: float                    # this prompt's TTFT target
    worker_id: str | None = None         # None: rejected
    reject_reason: str | None = None
    reason: str = ""                     # the policy's reason for its decision (x-kvroute-reason)
    decided_by: str = ""                 # its deciding term (prefix, load, slo-fallback, ...)
    ttft_s: float | None = None
    tpot_s: float | None = None          # mean time per output token after the first
    e2e_s: float | None = None
    queue_s: float | None = None         # arrival -> first scheduled
    cached_tokens: int = 0               # prompt tokens its worker found cached
    # when it was routed: the longest cached prefix on its worker, and on any worker
    cached_here_tokens: int = 0
    cached_anywhere_tokens: int = 0
    preemptions: int = 0
    finished_s: float | None = None
    cost_usd: float = 0.0                # share of its worker's busy cost, by tokens computed
    predicted_output_tokens: int | None = None   # the output-length producer's prediction
    slo: Slo = DEFAULT_SLO               # what it is judged by (slo_ttft_s is its TTFT target)
    # plugins that failed in its decision and were skipped (``skipped_plugins``)
    skipped_plugins: tuple[str, ...] = ()

    @property
    def completed(self) -> bool:
        return self.ttft_s is not None

    @property
    def meets_slo(self) -> bool:
        return self.slo.met(self.ttft_s, self.tpot_s, self.slo_ttft_s)

    @property
    def computed_tokens(self) -> int:
        """Tokens the worker had to compute: uncached prompt plus generated."""
        return self.prompt_tokens - self.cached_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class WorkerUsage:
    worker_id: str
    gpu: str
    price_per_hour: float
    busy_s: float                        # time with at least one unfinished request


def slo_ttft_target(idle_h100_prefill_s: float, slo: Slo = DEFAULT_SLO) -> float:
    """TTFT target of one prompt under ``slo``: by default max(0.5 s, 3 x its prefill time
    on an idle H100)."""
    return slo.ttft_target(idle_h100_prefill_s)


def allocate_costs(records: Sequence[RequestRecord], usage: Sequence[WorkerUsage]) -> None:
    """Split each worker's busy cost over its requests in proportion to computed tokens."""
    tokens: dict[str, int] = {}
    for r in records:
        if r.worker_id is not None and r.completed:
            tokens[r.worker_id] = tokens.get(r.worker_id, 0) + r.computed_tokens
    busy_cost = {u.worker_id: u.price_per_hour * u.busy_s / 3600.0 for u in usage}
    for r in records:
        if r.worker_id is not None and r.completed and tokens.get(r.worker_id):
            r.cost_usd = busy_cost.get(r.worker_id, 0.0) * r.computed_tokens / tokens[r.worker_id]


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarize(policy: str, records: Sequence[RequestRecord], usage: Sequence[WorkerUsage],
              prefix_ceiling: float, rate_scale: float) -> dict[str, Any]:
    """One ``summary.json`` entry."""
    done = [r for r in records if r.completed]
    ttft = [r.ttft_s for r in done if r.ttft_s is not None]
    tpot = [r.tpot_s for r in done if r.tpot_s is not None]
    e2e = [r.e2e_s for r in done if r.e2e_s is not None]
    prompt = sum(r.prompt_tokens for r in done)
    cached = sum(r.cached_tokens for r in done)
    served = prompt + sum(r.output_tokens for r in done)
    makespan = max((r.finished_s for r in done if r.finished_s is not None), default=0.0)
    fleet_cost = sum(u.price_per_hour for u in usage) * makespan / 3600.0
    busy_cost = sum(u.price_per_hour * u.busy_s for u in usage) / 3600.0
    per_worker: dict[str, int] = {}
    prompt_by_worker: dict[str, int] = {}
    cached_by_worker: dict[str, int] = {}
    for r in done:
        assert r.worker_id is not None
        per_worker[r.worker_id] = per_worker.get(r.worker_id, 0) + 1
        prompt_by_worker[r.worker_id] = prompt_by_worker.get(r.worker_id, 0) + r.prompt_tokens
        cached_by_worker[r.worker_id] = cached_by_worker.get(r.worker_id, 0) + r.cached_tokens
    return {
        "policy": policy,
        "rate_scale": rate_scale,
        "requests": len(records),
        "completed": len(done),
        "rejected": sum(1 for r in records if r.worker_id is None),
        "ttft_p50": _pct(ttft, 50), "ttft_p90": _pct(ttft, 90), "ttft_p99": _pct(ttft, 99),
        "tpot_p50": _pct(tpot, 50), "tpot_p90": _pct(tpot, 90), "tpot_p99": _pct(tpot, 99),
        "e2e_p50": _pct(e2e, 50), "e2e_p99": _pct(e2e, 99),
        "queue_p50": _pct([r.queue_s for r in done if r.queue_s is not None], 50),
        "slo_attainment": (sum(1 for r in records if r.meets_slo) / len(records)
                           if records else None),
        "goodput_rate_scale": None,
        "prefix_hit_rate": cached / prompt if prompt else 0.0,
        "prefix_hit_ceiling": prefix_ceiling,
        # what the workers' caches held when each request was routed: on any worker, and on
        # the one chosen (the gap between the two is lost to the routing decision)
        "prefix_cached_anywhere": (sum(r.cached_anywhere_tokens for r in done) / prompt
                                   if prompt else 0.0),
        "prefix_cached_chosen": (sum(r.cached_here_tokens for r in done) / prompt
                                 if prompt else 0.0),
        "prefix_passed_over_by_term": _passed_over_by_term(done, prompt),
        "preemptions": sum(r.preemptions for r in done),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "output_tokens": served - prompt,
        "makespan_s": makespan,
        "cost_usd_fleet": fleet_cost,
        "cost_usd_busy": busy_cost,
        "cost_per_mtok_fleet": fleet_cost / served * 1e6 if served else None,
        "cost_per_mtok_busy": busy_cost / served * 1e6 if served else None,
        "throughput_tok_s": served / makespan if makespan > 0 else None,
        "requests_per_worker": dict(sorted(per_worker.items())),
        "prompt_tokens_per_worker": dict(sorted(prompt_by_worker.items())),
        "cached_tokens_per_worker": dict(sorted(cached_by_worker.items())),
        "worker_busy_s": {u.worker_id: u.busy_s for u in usage},
        "output_prediction": output_prediction(done),
        # plugins skipped for failing, by the decisions they failed in (empty: none)
        "skipped_plugins": skipped_plugins(records),
    }


def skipped_plugins(records: Sequence[RequestRecord]) -> dict[str, int]:
    """How many decisions each plugin failed in (and was skipped), most first."""
    counts: dict[str, int] = {}
    for record in records:
        for plugin in record.skipped_plugins:
            counts[plugin] = counts.get(plugin, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def output_prediction(done: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """How the output-length predictions compared with what was generated: the ratio
    generated / predicted over the completed requests that had a prediction (1 is exact,
    below 1 predicted too long). None when no request had one."""
    ratios = [r.output_tokens / r.predicted_output_tokens for r in done
              if r.predicted_output_tokens and r.output_tokens > 0]
    if not ratios:
        return None
    return {
        "predicted": len(ratios),
        "share_of_completed": len(ratios) / len(done),
        "ratio_p10": _pct(ratios, 10), "ratio_p50": _pct(ratios, 50),
        "ratio_p90": _pct(ratios, 90),
        "within_2x": sum(1 for x in ratios if 0.5 <= x <= 2.0) / len(ratios),
    }


def _passed_over_by_term(done: Sequence[RequestRecord], prompt: int) -> dict[str, float]:
    """Per deciding term, the prefix cached elsewhere but not on the chosen worker when the
    request was routed, over all prompt tokens; largest first."""
    lost: dict[str, int] = {}
    for r in done:
        gap = r.cached_anywhere_tokens - r.cached_here_tokens
        if gap > 0:
            lost[r.decided_by] = lost.get(r.decided_by, 0) + gap
    return {term: tokens / prompt
            for term, tokens in sorted(lost.items(), key=lambda kv: -kv[1])} if prompt else {}


def ttft_values(records: Sequence[RequestRecord]) -> list[float]:
    return sorted(r.ttft_s for r in records if r.ttft_s is not None)


def attainment(summary: Mapping[str, Any]) -> float:
    value = summary.get("slo_attainment")
    return float(value) if value is not None else 0.0


__all__ = ["DEFAULT_SLO", "GOODPUT_ATTAINMENT", "SLO_TPOT_S", "SLO_TTFT_FLOOR_S",
           "SLO_TTFT_PREFILL_FACTOR", "RequestRecord", "Slo", "WorkerUsage", "allocate_costs",
           "attainment", "output_prediction", "slo_ttft_target", "summarize", "ttft_values"]
