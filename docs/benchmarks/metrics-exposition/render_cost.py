"""CPU time of one ``/metrics`` render of the router's registry with the series of a
10-worker fleet and 100 tenants: prometheus_client's ``generate_latest`` (every series with
its ``_created``) against ``router.exposition.render_without_created``.

    taskset -c 1 .venv/bin/python docs/benchmarks/metrics-exposition/render_cost.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from prometheus_client import generate_latest

from router.exposition import render_without_created
from router.metrics import RouterMetrics

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
GPUS = ("H100-80GB", "A100-80GB", "L40S-48GB")
RENDERS = 30
ROUNDS = 5


def populated() -> RouterMetrics:
    metrics = RouterMetrics()
    workers = [(f"w{i}", GPUS[i % len(GPUS)]) for i in range(10)]
    for t in range(100):
        tenant = f"tenant-{t}"
        metrics.admission_tenant_seen(tenant)
        for worker, gpu in workers:
            metrics.cost.labels(gpu, worker, metrics.tenants.label(tenant)).inc(0.001)
    for worker, gpu in workers:
        for status in (200, 500, 499, 503):
            for api in ("chat", "completions"):
                metrics.record_request(MODEL, worker, gpu, "default", status, api)
        for reason in ("prefix", "load", "price", "reserve-fast", "only-within-slo"):
            metrics.decisions.labels("default", "", worker, gpu, reason, "").inc()
        metrics.ttft.labels(worker, gpu).observe(0.1)
        metrics.tpot.labels(worker, gpu).observe(0.01)
        metrics.record_retry(worker, "http_5xx", MODEL)
    return metrics


def cpu_ms(render: Callable[[], bytes]) -> list[float]:
    """Per round, the mean CPU time of one render (ms)."""
    rounds = []
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(RENDERS):
            render()
        rounds.append((time.process_time() - started) / RENDERS * 1000)
    return rounds


def samples(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def main() -> None:
    metrics = populated()
    for label, render in (("generate_latest (with _created)",
                           lambda: generate_latest(metrics.registry)),
                          ("render_without_created",
                           lambda: render_without_created(metrics.registry))):
        body = render()
        rounds = cpu_ms(render)
        print(f"{label}: {samples(body):,} samples, {len(body):,} bytes; CPU ms per render "
              f"(median of {ROUNDS} rounds of {RENDERS}): {statistics.median(rounds):.1f} "
              f"(rounds {', '.join(f'{r:.1f}' for r in rounds)})")


if __name__ == "__main__":
    main()
