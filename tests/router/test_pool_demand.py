"""Pool demand aggregation and its ``kvroute_pool_demand_*`` gauges; winning-score histogram."""

from __future__ import annotations

from types import MappingProxyType

from prometheus_client.parser import text_string_to_metric_families

from policies.base import CandidateScore, Decision
from router.metrics import RouterMetrics
from router.pool_demand import PoolDemand, pool_demand
from workers.engine.profiles import BUILTIN_GPUS, LLAMA_3_8B
from workers.models import WorkerInfo, WorkerView


def _view(wid: str, gpu: str, pool: str | None, *, healthy: bool = True, kv: float = 0.0,
          waiting: int = 0, tokens: int = 0, model: str = "m") -> WorkerView:
    labels = MappingProxyType({"pool": pool} if pool else {})
    info = WorkerInfo(id=wid, url="http://127.0.0.1:1", gpu=BUILTIN_GPUS[gpu], models=(model,),
                      model_spec=LLAMA_3_8B, price_per_hour=1.0, labels=labels)
    return WorkerView(info=info, running=0, waiting=waiting, kv_usage=kv, block_size=16,
                      num_gpu_blocks=100, max_model_len=8192, inflight_requests=0,
                      inflight_tokens=tokens, healthy=healthy, staleness_s=0.0)


VIEWS = [
    _view("a", "h100", "premium", kv=0.5, waiting=2, tokens=100),
    _view("b", "h100", "premium", kv=0.9, waiting=1, tokens=50),
    _view("c", "h100", "premium", healthy=False, kv=0.7, waiting=4, tokens=7),
    _view("d", "l40s", None, kv=0.25, tokens=3),
    _view("e", "l40s", None, model="other"),
]


def test_pool_demand_groups_by_pool_label_or_gpu_and_model() -> None:
    assert pool_demand(VIEWS) == [
        PoolDemand("premium", "m", queued_tokens=157, waiting_requests=3, kv_usage=0.7,
                   healthy_workers=2, workers=3),
        PoolDemand("L40S-48GB", "m", queued_tokens=3, waiting_requests=0, kv_usage=0.25,
                   healthy_workers=1, workers=1),
        PoolDemand("L40S-48GB", "other", queued_tokens=0, waiting_requests=0, kv_usage=0.0,
                   healthy_workers=1, workers=1),
    ]


def test_a_pool_without_healthy_workers_reports_no_demand() -> None:
    """A dead worker's last scrape stayed in the sums: its pool read 2 waiting for good.
    The tokens the router sent it and has not seen served still count."""
    [demand] = pool_demand([_view("x", "a100", "p", healthy=False, kv=0.9, waiting=3,
                                  tokens=40)])
    assert (demand.kv_usage, demand.healthy_workers, demand.waiting_requests,
            demand.queued_tokens, demand.workers) == (0.0, 0, 0, 40, 1)   # (the router's own)


def _samples(metrics: RouterMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(metrics.render().decode())
            for s in f.samples}


def test_gauges_render_the_current_views() -> None:
    samples = _samples(RouterMetrics(lambda: VIEWS))
    key = (("model", "m"), ("pool", "premium"))
    assert samples[("kvroute_pool_demand_queued_tokens", key)] == 157.0
    assert samples[("kvroute_pool_demand_waiting_requests", key)] == 3.0
    assert abs(samples[("kvroute_pool_demand_kv_usage", key)] - 0.7) < 1e-12
    assert samples[("kvroute_pool_demand_healthy_workers", key)] == 2.0


def test_winner_scores_observe_the_chosen_candidate_only() -> None:
    metrics = RouterMetrics()
    decision = Decision(request_id="r", worker_id="b", model="m", profile="p", rule=None,
                        reason="", candidates=(
                            CandidateScore("a", 1.9, {"prefix": 1.0, "cost": 0.9}),
                            CandidateScore("b", 0.3, {"prefix": 0.2, "cost": 0.1})))
    metrics.record_decision(decision, "H100-80GB", "prefix", None, 1e-4)
    metrics.record_decision(decision, "H100-80GB", "prefix", None, 1e-4)
    samples = _samples(metrics)
    assert samples[("kvroute_decision_winner_score_sum",
                    (("profile", "p"), ("scorer", "prefix")))] == 0.4
    assert samples[("kvroute_decision_winner_score_count",
                    (("profile", "p"), ("scorer", "cost")))] == 2.0
    assert samples[("kvroute_decision_winner_score_bucket",
                    (("le", "0.1"), ("profile", "p"), ("scorer", "cost")))] == 2.0


def test_no_candidate_records_no_scores() -> None:
    metrics = RouterMetrics()
    metrics.record_decision(Decision(request_id="r", worker_id=None, model="m", profile="p",
                                     rule=None, reason="none"), "", "no-candidate", None, 1e-5)
    assert not [k for k in _samples(metrics) if k[0].startswith("kvroute_decision_winner")]
