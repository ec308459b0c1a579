"""Alert tiers against the live stack (rules copied with every ``for:`` set to 0s): the
overloaded 16-block worker fires the KV-usage warning; stopping the only worker of a model
fires the no-healthy-worker emergency; the alerts on the router's own series (garbage
collection, a refused routing file) read what it exports."""

from __future__ import annotations

import math
import re
import time
from typing import Any

import pytest
import yaml

from tests.observability.obs_stack import (
    MODEL,
    RULE_FILES,
    TINY_MODEL,
    TINY_WORKER,
    Stack,
)

pytestmark = [pytest.mark.observability, pytest.mark.integration]


def test_kv_usage_warning_fired_for_the_overloaded_worker(live_stack: Stack) -> None:
    series = live_stack.prometheus.query_range(
        'ALERTS{alertname="KvCacheUsageHigh", alertstate="firing"}',
        live_stack.started_at, live_stack.traffic_done_at, 1.0)
    assert {s.labels["worker"] for s in series} == {TINY_WORKER}
    assert {s.labels["severity"] for s in series} == {"warning"}
    peak = live_stack.prometheus.query_range(
        f'vllm:kv_cache_usage_perc{{worker="{TINY_WORKER}"}}',
        live_stack.started_at, live_stack.traffic_done_at, 1.0)
    assert max(v for s in peak for _, v in s.points) > 0.8


def _firing(alerts: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [a for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"]


def test_no_healthy_worker_emergency_fires_when_a_models_workers_are_gone(
        live_stack: Stack) -> None:
    deadline = time.monotonic() + 20
    firing: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not firing:
        firing = _firing(live_stack.prometheus.alerts(), "NoHealthyWorker")
        time.sleep(0.5)
    # named after the router that sees none (the one router here)
    assert [{**a["labels"], "instance": bool(a["labels"]["instance"])} for a in firing] == [
        {"alertname": "NoHealthyWorker", "model": TINY_MODEL, "severity": "emergency",
         "instance": True}]


def test_the_model_with_workers_left_has_no_emergency(live_stack: Stack) -> None:
    models = {a["labels"].get("model") for a in
              _firing(live_stack.prometheus.alerts(), "NoHealthyWorker")}
    assert MODEL not in models


def test_success_rate_emergency_follows_the_recorded_ratio(live_stack: Stack) -> None:
    # every worker of MODEL answers a share of generations with a 500 (retried by the router)
    errors = live_stack.prometheus.query(
        f'kvroute_requests_total{{model="{MODEL}", status="500"}}')
    assert sum(float(r["value"][1]) for r in errors) >= 1
    # rate() ignores a counter's first sample, so a 500 series whose only increments came
    # before its first scrape reads as 0 errors: the alert must follow the recorded ratio,
    # of the answers clients got (a 500 retried elsewhere reached none)
    ratio = live_stack.prometheus.query("model:kvroute_client_success:ratio5m")
    by_model = {r["metric"]["model"]: float(r["value"][1]) for r in ratio}
    attempts = live_stack.prometheus.query("model:kvroute_requests_success:ratio5m")
    assert by_model[MODEL] >= {r["metric"]["model"]: float(r["value"][1])
                               for r in attempts}[MODEL] - 1e-9
    firing = _firing(live_stack.prometheus.alerts(), "SuccessRateLow")
    assert (MODEL in {a["labels"]["model"] for a in firing}) == (by_model[MODEL] < 0.999)
    assert {a["labels"]["severity"] for a in firing} <= {"emergency"}


@pytest.mark.parametrize("alert", ["RouterGcPauseShareHigh", "RouterGcPauseLong",
                                   "RouterEventLoopStalled", "RoutingConfigRefused",
                                   "RouterOpenFilesHigh"])
def test_router_alerts_read_the_series_the_router_exports(live_stack: Stack, alert: str) -> None:
    """The measured side of each alert on the router's own series (its expression up to the
    comparison) gives one finite, non-negative value for the router: the metric name, the
    ``le`` bucket and the labels it sums by are the ones ``kvroute serve`` exports. That
    these alerts fire past their thresholds is ``test_obs_rules``' promtool tests."""
    rules = [rule for group in yaml.safe_load(RULE_FILES[1].read_text())["groups"]
             for rule in group["rules"] if rule.get("alert") == alert]
    measured = re.split(r"\s(?:>=?|==)\s", rules[0]["expr"])[0]
    assert "kvroute:threshold" not in measured and measured.strip()
    router = live_stack.router_url.split("://", 1)[1]
    values = {r["metric"].get("instance"): float(r["value"][1])
              for r in live_stack.prometheus.query(measured)}
    assert list(values) == [router]
    assert 0.0 <= values[router] < math.inf
