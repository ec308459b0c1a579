"""Autoscaling demand per pool and model, aggregated from the live worker views.

A pool is the worker's ``pool`` label from the fleet file, or its GPU class when it has none.
The numbers are what an autoscaler (KEDA, HPA on external metrics) needs to size a pool:
tokens the router has dispatched and not yet seen served, KV-cache usage, and queued requests.
The scraped numbers (waiting requests, KV usage) count the pool's healthy workers alone: a
dead worker's last scrape stays in its view, and counted, it held a pool's demand up for
good. Queued tokens are the router's own count, of every worker (one whose scrapes time out
under load is still loaded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workers.models import WorkerView


@dataclass(frozen=True, slots=True)
class PoolDemand:
    pool: str
    model: str
    queued_tokens: int        # router's in-flight tokens: prefill not started + decode left
    waiting_requests: int     # scraped waiting + dispatched since the last scrape (healthy)
    kv_usage: float           # mean over healthy workers (0..1); 0 when none is healthy
    healthy_workers: int
    workers: int


def pool_of(view: WorkerView) -> str:
    return view.labels.get("pool") or view.gpu.name


def pool_demand(views: Sequence[WorkerView]) -> list[PoolDemand]:
    """One entry per (pool, model) in first-seen order."""
    groups: dict[tuple[str, str], list[WorkerView]] = {}
    for view in views:
        groups.setdefault((pool_of(view), view.info.models[0]), []).append(view)
    result = []
    for (pool, model), members in groups.items():
        healthy = [v for v in members if v.healthy]
        kv = sum(v.kv_usage for v in healthy) / len(healthy) if healthy else 0.0
        result.append(PoolDemand(
            pool=pool, model=model,
            queued_tokens=sum(v.inflight_tokens for v in members),
            waiting_requests=sum(v.waiting for v in healthy),
            kv_usage=kv, healthy_workers=len(healthy), workers=len(members)))
    return result
