"""The rule files pass ``promtool check rules``; every alert threshold is a parameter of
recording.yml; the tiers are the documented ones."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.observability.obs_stack import RULE_FILES, shortened_rules

pytestmark = pytest.mark.observability

RECORDING, ALERTS = RULE_FILES


def _rules(path: Path) -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


def test_promtool_check_rules_passes() -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool missing: make test-observability installs it"
    result = subprocess.run([promtool, "check", "rules", *map(str, RULE_FILES)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 27 rules found" in result.stdout      # recording
    assert "SUCCESS: 25 rules found" in result.stdout      # alerts


def test_promtool_accepts_the_shortened_copies(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None
    copies = shortened_rules(tmp_path)
    assert all(r.get("for") == "0s" for r in _rules(copies[1]))
    result = subprocess.run([promtool, "check", "rules", *map(str, copies)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_tiers() -> None:
    tiers = {r["alert"]: r["labels"]["severity"] for r in _rules(ALERTS)}
    assert tiers == {
        "KvCacheUsageHigh": "warning", "WorkerEjected": "warning",
        "TtftP99AboveBaseline": "warning", "RouterGcPauseShareHigh": "warning",
        "RouterGcPauseLong": "warning", "RoutingConfigRefused": "warning",
        "RouterEventLoopStalled": "warning",
        "WorkerCertificateExpiresSoon": "warning", "RouterShedsLoad": "warning",
        "StateStoreDegraded": "warning", "ReplicasDisagree": "warning",
        "ClientKeysRefused": "warning", "FleetConfigRefused": "warning",
        "WorkerDown": "warning", "WorkerAnswersFailing": "warning",
        "RoutingFilesDiffer": "warning", "RouterOpenFilesHigh": "warning",
        "RoutingPluginFailing": "warning", "RoutingConfigWarnings": "warning",
        "PreemptionStorm": "critical", "WorkerFlapping": "critical",
        "TtftP99FarAboveBaseline": "critical",
        "NoHealthyWorker": "emergency", "SuccessRateLow": "emergency",
        "RouterDown": "emergency"}


def test_thresholds_are_defined_once_and_only_in_recording_rules() -> None:
    recorded = [r["record"] for r in _rules(RECORDING)]
    thresholds = {name for name in recorded if name.startswith("kvroute:threshold:")}
    assert len(recorded) == len(set(recorded))
    used = set()
    for rule in _rules(ALERTS):
        expr = rule["expr"]
        assert not re.search(r"[<>]=?\s*[0-9.]+\s*$", expr.strip()), rule["alert"]
        used.update(re.findall(r"kvroute:threshold:\w+", expr))
    # NoHealthyWorker compares with 0 healthy workers, RoutingConfigRefused with a refused
    # load (0), ClientKeysRefused and FleetConfigRefused with a refused file (0),
    # StateStoreDegraded with a
    # degraded store (1), ReplicasDisagree and RoutingFilesDiffer two counts, WorkerDown and
    # RouterDown a failed scrape (0);
    # every other alert names its parameter
    assert used == thresholds
    values = {r["record"]: r["expr"] for r in _rules(RECORDING)}
    assert values["kvroute:threshold:kv_usage_warning"] == "vector(0.8)"
    assert values["kvroute:threshold:ttft_sigma_warning"] == "vector(2)"
    assert values["kvroute:threshold:ttft_sigma_critical"] == "vector(4)"
    assert values["kvroute:threshold:success_ratio_emergency"] == "vector(0.999)"
    assert values["kvroute:threshold:worker_ejections_warning"] == "vector(1)"
    assert values["kvroute:threshold:worker_failures_warning"] == "vector(0.05)"
    assert values["kvroute:threshold:gc_pause_share_warning"] == "vector(0.02)"
    assert values["kvroute:threshold:gc_long_pauses_warning"] == "vector(1)"
    assert values["kvroute:threshold:loop_stalls_warning"] == "vector(1)"
    assert values["kvroute:threshold:open_files_warning"] == "vector(0.8)"
    assert values["kvroute:threshold:plugin_failures_warning"] == "vector(0)"
    assert values["kvroute:threshold:config_warnings_warning"] == "vector(0)"


def _promtool_test(tmp_path: Path, name: str, tests: dict[str, Any]) -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(tests))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def _warning(instance: str, summary: str) -> dict[str, Any]:
    return {"exp_labels": {"severity": "warning", "instance": instance},
            "exp_annotations": {"summary": summary}}


def test_gc_pause_share_fires_after_five_minutes_above_two_percent(tmp_path: Path) -> None:
    """r1's loop stands still 1 % of the time for young collections, then 1.5 % more for full
    ones from minute 6 (2.5 % by 8m, firing 5m later); r2 stays at 0.5 %. The summary and the
    description speak to the reader of the page (the share, what to compare)."""
    summary = ("The router at r1 stood still for the garbage collector 2.5% of the last 5m")
    _promtool_test(tmp_path, "gc-share", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'kvroute_gc_pause_seconds_sum{instance="r1",generation="0"}',
                 "values": "0+0.6x25"},
                {"series": 'kvroute_gc_pause_seconds_sum{instance="r1",generation="2"}',
                 "values": "0x5 0.9+0.9x19"},
                {"series": 'kvroute_gc_pause_seconds_sum{instance="r2",generation="0"}',
                 "values": "0+0.3x25"},
            ],
            "alert_rule_test": [
                {"eval_time": "6m", "alertname": "RouterGcPauseShareHigh", "exp_alerts": []},
                {"eval_time": "10m", "alertname": "RouterGcPauseShareHigh", "exp_alerts": []},
                {"eval_time": "15m", "alertname": "RouterGcPauseShareHigh",
                 "exp_alerts": [_warning("r1", summary) | {"exp_annotations": {
                     "summary": summary,
                     "description": (
                         "Every request it holds waits while it collects. The objects it "
                         "keeps alive grew: compare process_resident_memory_bytes and the "
                         "generation-2 rate of kvroute_gc_pause_seconds_count; a leak shows "
                         "as both climbing.\n")}}]},
            ],
        }],
    })


def test_gc_long_pause_fires_on_one_collection_over_100ms_and_clears_ten_minutes_later(
        tmp_path: Path) -> None:
    """Collections under 100 ms (in the 0.1 bucket) never count, however many; r1's one
    full collection past the bucket fires at once and leaves the 10-minute window."""
    summary = ("The router at r1 stopped 1 times in 10m for a garbage collection of 100 ms "
               "or more")
    _promtool_test(tmp_path, "gc-long", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'kvroute_gc_pause_seconds_count{instance="r1",generation="0"}',
                 "values": "0+50x15"},
                {"series":
                 'kvroute_gc_pause_seconds_bucket{instance="r1",generation="0",le="0.1"}',
                 "values": "0+50x15"},
                {"series": 'kvroute_gc_pause_seconds_count{instance="r1",generation="2"}',
                 "values": "0 0 0 1 1 1 1 1 1 1 1 1 1 1 1 1"},
                {"series":
                 'kvroute_gc_pause_seconds_bucket{instance="r1",generation="2",le="0.1"}',
                 "values": "0x15"},
                {"series": 'kvroute_gc_pause_seconds_count{instance="r2",generation="2"}',
                 "values": "0 0 0 1 2 2 2 2 2 2 2 2 2 2 2 2"},
                {"series":
                 'kvroute_gc_pause_seconds_bucket{instance="r2",generation="2",le="0.1"}',
                 "values": "0 0 0 1 2 2 2 2 2 2 2 2 2 2 2 2"},
            ],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "RouterGcPauseLong", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "RouterGcPauseLong",
                 "exp_alerts": [_warning("r1", summary)]},
                {"eval_time": "12m", "alertname": "RouterGcPauseLong",
                 "exp_alerts": [_warning("r1", summary)]},
                {"eval_time": "14m", "alertname": "RouterGcPauseLong", "exp_alerts": []},
            ],
        }],
    })


def test_a_loop_stall_of_250ms_fires_at_once_and_clears_ten_minutes_later(
        tmp_path: Path) -> None:
    """Wake-ups under 250 ms late (in the 0.25 bucket) never count, however many; r1's one
    stall past the bucket fires at once and leaves the 10-minute window."""
    summary = "The router at r1 stood still 1 times in 10m for 250 ms or more"
    stalled = _warning("r1", summary) | {"exp_annotations": {
        "summary": summary,
        "description": (
            "Every request it holds waited that long: a body of tens of megabytes parsed "
            "(the interpreter lock held), a garbage collection (RouterGcPauseLong says if it "
            "was one), a slow plugin. kvroute_event_loop_lag_seconds has how late its loop "
            "ran; a profile of the process (py-spy) says what held it.\n")}}
    _promtool_test(tmp_path, "loop-stall", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'kvroute_event_loop_lag_seconds_count{instance="r1"}',
                 "values": "0+600x2 1201+600x12"},
                {"series": 'kvroute_event_loop_lag_seconds_bucket{instance="r1",le="0.25"}',
                 "values": "0+600x2 1200+600x12"},
                {"series": 'kvroute_event_loop_lag_seconds_count{instance="r2"}',
                 "values": "0+600x14"},
                {"series": 'kvroute_event_loop_lag_seconds_bucket{instance="r2",le="0.25"}',
                 "values": "0+600x14"},
            ],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "RouterEventLoopStalled", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "RouterEventLoopStalled",
                 "exp_alerts": [stalled]},
                {"eval_time": "12m", "alertname": "RouterEventLoopStalled",
                 "exp_alerts": [stalled]},
                {"eval_time": "14m", "alertname": "RouterEventLoopStalled", "exp_alerts": []},
            ],
        }],
    })


def test_routing_config_refused_fires_after_a_minute_and_clears_on_the_next_good_load(
        tmp_path: Path) -> None:
    """r1's operator saves a bad routing file at 2m and a good one at 6m: pending at 2m,
    firing from 3m, gone at 6m; a refusal mended within the minute (r2) never fires."""
    refused = _warning("r1", "The router at r1 refused its routing file and serves the last "
                       "good config")
    refused["exp_annotations"]["description"] = (
        "The file on disk is not the policy in force. The router's /debug/routing "
        "(last_refusal) and `kvroute validate FILE` say why; "
        "kvroute_config_last_reload_success_timestamp_seconds says since when the config in "
        "force serves.\n")
    _promtool_test(tmp_path, "config-refused", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'kvroute_config_last_reload_successful{instance="r1"}',
                 "values": "1 1 0 0 0 0 1 1"},
                {"series": 'kvroute_config_last_reload_successful{instance="r2"}',
                 "values": "1 1 0 1 1 1 1 1"},
            ],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "RoutingConfigRefused", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "RoutingConfigRefused",
                 "exp_alerts": [refused]},
                {"eval_time": "5m", "alertname": "RoutingConfigRefused",
                 "exp_alerts": [refused]},
                {"eval_time": "6m", "alertname": "RoutingConfigRefused", "exp_alerts": []},
            ],
        }],
    })


def test_worker_ejected_fires_on_an_ejection_or_a_stall_and_clears_ten_minutes_later(
        tmp_path: Path) -> None:
    """``promtool test rules`` evaluates the alert over the series the router exports: each
    worker's counts start at 0 (``RouterMetrics.start_worker_counts``), so its first
    ejection or stall is an increase."""
    promtool = shutil.which("promtool")
    assert promtool is not None
    tests = {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'kvroute_worker_ejections_total{worker="w1"}',
                 "values": "0 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1"},
                {"series": 'kvroute_worker_stalls_total{worker="w1"}', "values": "0x15"},
                {"series": 'kvroute_worker_stalls_total{worker="w2"}', "values": "0x15"},
                {"series": 'kvroute_worker_ejections_total{worker="w4"}', "values": "0x15"},
                {"series": 'kvroute_worker_stalls_total{worker="w4"}',
                 "values": "0 0 0 0 1 1 1 1 1 1 1 1 1 1 1 1"},
                {"series": 'kvroute_worker_ejections_total{worker="w2"}',
                 "values": "0x15"},
                # a count that first appears at 1 shows no increase: hence the zeros
                {"series": 'kvroute_worker_ejections_total{worker="w3"}',
                 "values": "_ _ 1 1 1 1 1 1 1 1 1 1 1 1 1 1"},
            ],
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": "WorkerEjected", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "WorkerEjected", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "worker": "w1"},
                    "exp_annotations": {"summary": (
                        "w1 was set aside 1 times in 10m: its requests fail or hang (a hung "
                        "engine, a frozen process)")}}]},
                {"eval_time": "5m", "alertname": "WorkerEjected", "exp_alerts": [
                    {"exp_labels": {"severity": "warning", "worker": "w1"},
                     "exp_annotations": {"summary": (
                         "w1 was set aside 1 times in 10m: its requests fail or hang (a "
                         "hung engine, a frozen process)")}},
                    {"exp_labels": {"severity": "warning", "worker": "w4"},
                     "exp_annotations": {"summary": (
                         "w4 was set aside 1 times in 10m: its requests fail or hang (a "
                         "hung engine, a frozen process)")}}]},
                {"eval_time": "14m", "alertname": "WorkerEjected", "exp_alerts": []},
            ],
        }, {
            # increase() extrapolates: 2.2 here, which the summary printed as "2.2 times"
            "interval": "1m",
            "input_series": [
                {"series": 'kvroute_worker_ejections_total{worker="w5"}',
                 "values": "3 3 4 4 5 5 6 6 7 7 8 8 9 9 10 10"},
                {"series": 'kvroute_worker_stalls_total{worker="w5"}', "values": "0x15"},
            ],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": "WorkerEjected", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "worker": "w5"},
                    "exp_annotations": {"summary": (
                        "w5 was set aside 2 times in 10m: its requests fail or hang (a hung "
                        "engine, a frozen process)")}}]},
            ],
        }],
    }
    path = tmp_path / "ejection-test.yml"
    path.write_text(yaml.safe_dump(tests))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_certificate_expiry_fires_a_week_before_and_for_an_expired_one(tmp_path: Path) -> None:
    """In promtool's clock (Unix time from 0): w1's certificate expires at 7 days and 30
    minutes, and two routers report it; w2's at 30 days; w3's expired at 10 minutes. At 20m
    w1 has more than 7 days left: only w3 fires. From 30m w1 is inside the week, and after the
    5 minutes' wait both fire, one alert for w1 whatever the number of routers; w2 never."""
    description = ("Once it expires the router no longer trusts the worker: it is marked down "
                   "and gets no requests. Renew the certificate the worker serves.\n")

    def expiring(worker: str, left: str) -> dict[str, Any]:
        return {"exp_labels": {"severity": "warning", "worker": worker},
                "exp_annotations": {
                    "summary": f"The TLS certificate of {worker} expires in {left}",
                    "description": description}}

    week = 7 * 24 * 3600
    series = "kvroute_worker_tls_cert_expiry_timestamp_seconds"
    _promtool_test(tmp_path, "certificate-expiry", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": f'{series}{{instance="r1", worker="w1"}}',
                 "values": f"{week + 1800}x60"},
                {"series": f'{series}{{instance="r2", worker="w1"}}',
                 "values": f"{week + 1800}x60"},
                {"series": f'{series}{{instance="r1", worker="w2"}}',
                 "values": f"{30 * 24 * 3600}x60"},
                {"series": f'{series}{{instance="r1", worker="w3"}}', "values": "600x60"},
            ],
            "alert_rule_test": [
                {"eval_time": "20m", "alertname": "WorkerCertificateExpiresSoon",
                 "exp_alerts": [expiring("w3", "-10m 0s")]},
                {"eval_time": "40m", "alertname": "WorkerCertificateExpiresSoon",
                 "exp_alerts": [expiring("w1", "6d 23h 50m 0s"),
                                expiring("w3", "-30m 0s")]},
            ],
        }],
    })


def test_success_rate_counts_server_errors_only(tmp_path: Path) -> None:
    """Worker 4xx answers (a client's unknown previous_response_id) and clients that left
    (499) brought the ratio to 0.88 with no server error, and paged (SuccessRateLow); and a
    failing worker whose requests were all retried and served elsewhere paged too, clients
    seeing no error: the page counts the answers clients got."""
    requests, retries = "kvroute_requests_total", "kvroute_retries_total"
    _promtool_test(tmp_path, "success-ratio", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                # m1: 100 good answers a minute, 10 worker 404s and 5 clients gone
                {"series": f'{requests}{{model="m1", worker="w0", status="200"}}',
                 "values": "0+100x20"},
                {"series": f'{requests}{{model="m1", worker="w0", status="404"}}',
                 "values": "0+10x20"},
                {"series": f'{requests}{{model="m1", worker="w0", status="499"}}',
                 "values": "0+5x20"},
                # m2: 100 good answers and 1 server error a minute
                {"series": f'{requests}{{model="m2", worker="w1", status="200"}}',
                 "values": "0+99x20"},
                {"series": f'{requests}{{model="m2", worker="w1", status="502"}}',
                 "values": "0+1x20"},
                # m3: every answer a server error (no other series: the ratio was missing)
                {"series": f'{requests}{{model="m3", worker="w2", status="500"}}',
                 "values": "0+10x20"},
                # m4: a worker failing 5 a minute, each retried on another that answers:
                # clients got 100 answers a minute, none a server error (it paged)
                {"series": f'{requests}{{model="m4", worker="w3", status="500"}}',
                 "values": "0+5x20"},
                {"series": f'{requests}{{model="m4", worker="w4", status="200"}}',
                 "values": "0+100x20"},
                {"series": f'{retries}{{model="m4", worker="w3", reason="http_5xx"}}',
                 "values": "0+5x20"},
                # m5: 10 server errors a minute, 5 of them retried (one worker's adapter
                # unloaded too: its 404 retried, no server error): 95 + 5 answers, 5 failed
                {"series": f'{requests}{{model="m5", worker="w5", status="500"}}',
                 "values": "0+10x20"},
                {"series": f'{requests}{{model="m5", worker="w6", status="200"}}',
                 "values": "0+95x20"},
                {"series": f'{retries}{{model="m5", worker="w5", reason="http_5xx"}}',
                 "values": "0+5x20"},
                {"series": f'{requests}{{model="m5", worker="w6", status="404"}}',
                 "values": "0+2x20"},
                {"series": f'{retries}{{model="m5", worker="w6", reason="model_not_found"}}',
                 "values": "0+2x20"},
            ],
            "promql_expr_test": [{
                "expr": "model:kvroute_requests_success:ratio5m", "eval_time": "10m",
                "exp_samples": [{"labels": 'model:kvroute_requests_success:ratio5m{model="m1"}',
                                 "value": 1},
                                {"labels": 'model:kvroute_requests_success:ratio5m{model="m2"}',
                                 "value": 0.99},
                                {"labels": 'model:kvroute_requests_success:ratio5m{model="m3"}',
                                 "value": 0},
                                {"labels": 'model:kvroute_requests_success:ratio5m{model="m4"}',
                                 "value": 1 - 5 / 105},
                                {"labels": 'model:kvroute_requests_success:ratio5m{model="m5"}',
                                 "value": 1 - 10 / 107}]}, {
                "expr": "model:kvroute_client_success:ratio5m", "eval_time": "10m",
                "exp_samples": [{"labels": 'model:kvroute_client_success:ratio5m{model="m1"}',
                                 "value": 1},
                                {"labels": 'model:kvroute_client_success:ratio5m{model="m2"}',
                                 "value": 0.99},
                                {"labels": 'model:kvroute_client_success:ratio5m{model="m3"}',
                                 "value": 0},
                                {"labels": 'model:kvroute_client_success:ratio5m{model="m4"}',
                                 "value": 1},
                                {"labels": 'model:kvroute_client_success:ratio5m{model="m5"}',
                                 "value": 0.95}]}],
            "alert_rule_test": [
                {"eval_time": "15m", "alertname": "SuccessRateLow", "exp_alerts": [
                    {"exp_labels": {"severity": "emergency", "model": "m2"},
                     "exp_annotations": {
                         "summary": "Only 99% of m2 answers clients got from workers are not "
                                    "server errors", "description": _SUCCESS_DESCRIPTION}},
                    {"exp_labels": {"severity": "emergency", "model": "m3"},
                     "exp_annotations": {
                         "summary": "Only 0% of m3 answers clients got from workers are not "
                                    "server errors", "description": _SUCCESS_DESCRIPTION}},
                    {"exp_labels": {"severity": "emergency", "model": "m5"},
                     "exp_annotations": {
                         "summary": "Only 95% of m5 answers clients got from workers are not "
                                    "server errors", "description": _SUCCESS_DESCRIPTION}}]}],
        }],
    })


_SUCCESS_DESCRIPTION = (
    "Counted per answer that reached a client: an attempt retried on another worker is left "
    "out (a failing worker whose requests succeed elsewhere is WorkerAnswersFailing's or "
    "WorkerEjected's, not this page). Look for the workers in "
    'kvroute_requests_total{status=~"5.."}.\n')


def test_router_sheds_load_fires_after_five_minutes_above_one_percent(tmp_path: Path) -> None:
    description = (
        "Its admission.max_in_flight slots stay full and the queue overflows or waits past "
        "wait_timeout_s. Add workers (and raise max_in_flight with them), or lower the "
        "budgets of the tenants that fill it (kvroute_admission_wait_seconds, "
        "kvroute_admission_waiting).\n")
    requests = "kvroute_requests_total"
    rejections = "kvroute_admission_rejections_total"
    _promtool_test(tmp_path, "sheds-load", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                # r1: 100 requests a minute, 5 of them turned away from minute 10 on (5 %)
                {"series": f'{requests}{{instance="r1", status="200", profile="default"}}',
                 "values": "0+100x40"},
                {"series": f'{rejections}{{instance="r1", reason="queue_full", tenant="a"}}',
                 "values": "0x10 0+5x30"},
                # r2: the same traffic, 1 in 1,000 turned away: under the threshold
                {"series": f'{requests}{{instance="r2", status="200", profile="default"}}',
                 "values": "0+1000x40"},
                {"series": f'{rejections}{{instance="r2", reason="wait_timeout", tenant="a"}}',
                 "values": "0+1x40"},
                # r3: budgets refuse a fifth of its requests: a tenant's limit, not overload
                {"series": f'{requests}{{instance="r3", status="200", profile="default"}}',
                 "values": "0+100x40"},
                {"series": f'{rejections}{{instance="r3", reason="requests_per_minute", '
                           'tenant="a"}', "values": "0+20x40"},
            ],
            "alert_rule_test": [
                {"eval_time": "13m", "alertname": "RouterShedsLoad", "exp_alerts": []},
                {"eval_time": "20m", "alertname": "RouterShedsLoad", "exp_alerts": [
                    {"exp_labels": {"severity": "warning", "instance": "r1"},
                     "exp_annotations": {
                         "summary": "The router at r1 turned away 5% of its requests (503) "
                                    "for want of an in-flight slot",
                         "description": description}}]},
            ],
        }],
    })


def test_router_open_files_high_fires_for_a_router_near_its_limit(tmp_path: Path) -> None:
    """r1 holds 900 of its 1,024 files from minute 2 on: firing 5 minutes later. r2 at half
    its limit, and a worker (another job) at 95 %, never."""
    description = (
        "Each client connection and each connection to a worker holds a file. At the limit "
        "the router cannot accept clients (their connections are reset, and its log says "
        "nothing of them) and answers 503 where it cannot reach a worker. Slow clients "
        "holding connections (a body trickled in, a stream read slowly) or more load than "
        "one process takes: put a proxy that buffers bodies in front, add routers, or raise "
        "the hard limit (LimitNOFILE=, ulimit -Hn).\n")
    router, worker = 'job="kvroute-router"', 'job="vllm-workers"'
    _promtool_test(tmp_path, "open-files", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": f'process_open_fds{{{router}, instance="r1"}}',
                 "values": "100 100 900x20"},
                {"series": f'process_max_fds{{{router}, instance="r1"}}', "values": "1024x22"},
                {"series": f'process_open_fds{{{router}, instance="r2"}}', "values": "512x22"},
                {"series": f'process_max_fds{{{router}, instance="r2"}}', "values": "1024x22"},
                {"series": f'process_open_fds{{{worker}, instance="w1"}}', "values": "973x22"},
                {"series": f'process_max_fds{{{worker}, instance="w1"}}', "values": "1024x22"},
            ],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": "RouterOpenFilesHigh", "exp_alerts": []},
                {"eval_time": "10m", "alertname": "RouterOpenFilesHigh", "exp_alerts": [
                    {"exp_labels": {"severity": "warning", "instance": "r1"},
                     "exp_annotations": {
                         "summary": "The router at r1 holds 87.89% of its open-file limit",
                         "description": description}}]},
            ],
        }],
    })


def test_routing_plugin_failing_fires_for_a_plugin_failing_for_ten_minutes(
        tmp_path: Path) -> None:
    """r1's `zone` filter fails on a decision a second from minute 2 on: firing 10 minutes
    after the rate shows. Its `kv` scorer failed once (minute 3), and r2's plugins never:
    quiet."""
    router = 'job="kvroute-router"'
    description = (
        "It raised, or returned what its kind must not, in 1 decisions a second over 5 "
        "minutes, and was skipped in each: a filter let every worker through, a scorer added "
        "nothing, a picker's choice fell to the best total, a producer's attribute was "
        "missing. Its traceback is in the router's log (once a minute) and the decisions "
        "name it in skipped_plugins (/debug/decisions): mend it, or take it out of the "
        "routing file (which reloads).\n")
    _promtool_test(tmp_path, "plugin-failing", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": f'kvroute_plugin_failures_total{{{router}, instance="r1", '
                           'profile="default", plugin="zone"}',
                 "values": "0 0 0+60x30"},
                {"series": f'kvroute_plugin_failures_total{{{router}, instance="r1", '
                           'profile="default", plugin="kv"}',
                 "values": "0 0 0 1x30"},
                {"series": f'kvroute_decisions_total{{{router}, instance="r2", '
                           'profile="default"}', "values": "0+60x32"},
            ],
            "alert_rule_test": [
                {"eval_time": "8m", "alertname": "RoutingPluginFailing", "exp_alerts": []},
                {"eval_time": "20m", "alertname": "RoutingPluginFailing", "exp_alerts": [
                    {"exp_labels": {"severity": "warning", "instance": "r1",
                                    "profile": "default", "plugin": "zone"},
                     "exp_annotations": {
                         "summary": "Plugin zone of profile default fails at the router at r1",
                         "description": description}}]},
            ],
        }],
    })


def test_state_store_degraded_fires_after_a_minute_without_redis(tmp_path: Path) -> None:
    """r1 loses its Redis from 2m to 5m: firing from 3m, gone at 5m; r2's blip of less than
    a minute never fires."""
    degraded = _warning("r1", "The router at r1 cannot use its Redis and routes on its own "
                        "state")
    degraded["exp_annotations"]["description"] = (
        "Replicas no longer see each other's in-flight requests, each admits a tenant its whole "
        "budget, and Responses API owners it records wait to be written. Its log says why "
        "(unreachable, a password refused, out of memory).\n")
    _promtool_test(tmp_path, "store-degraded", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'kvroute_state_store_degraded{instance="r1"}',
                 "values": "0 0 1 1 1 0 0"},
                {"series": 'kvroute_state_store_degraded{instance="r2"}',
                 "values": "0 0 1 0 0 0 0"},
            ],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "StateStoreDegraded", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "StateStoreDegraded",
                 "exp_alerts": [degraded]},
                {"eval_time": "4m", "alertname": "StateStoreDegraded",
                 "exp_alerts": [degraded]},
                {"eval_time": "5m", "alertname": "StateStoreDegraded", "exp_alerts": []},
            ],
        }],
    })


def test_replicas_disagree_fires_for_a_router_on_another_database(tmp_path: Path) -> None:
    """Three routers of one job: r3 starts at 1m on another Redis database (it sees only
    itself, the others see each other): firing 5m later, until r3 joins them at 9m. A router
    starting (its first sync a moment behind the others') never fires."""
    disagree = {"exp_labels": {"severity": "warning", "job": "kvroute"},
                "exp_annotations": {"summary": "The routers of kvroute do not all share "
                                               "state: some see 2 replicas through Redis, "
                                               "others fewer",
                                    "description": "A router that counts fewer replicas than "
                "the others is on another Redis or database (check --redis-url and its /N), or "
                "has none: it routes and spends the tenants' budgets on its own. "
                "kvroute_state_store_replicas by instance says which.\n"}}
    _promtool_test(tmp_path, "replicas-disagree", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'kvroute_state_store_replicas{job="kvroute",instance="r1"}',
                 "values": "2 2 2 2 2 2 2 2 2 3 3 3"},
                {"series": 'kvroute_state_store_replicas{job="kvroute",instance="r2"}',
                 "values": "2 2 2 2 2 2 2 2 2 3 3 3"},
                {"series": 'kvroute_state_store_replicas{job="kvroute",instance="r3"}',
                 "values": "_ 1 1 1 1 1 1 1 1 3 3 3"},
            ],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": "ReplicasDisagree", "exp_alerts": []},
                {"eval_time": "6m", "alertname": "ReplicasDisagree", "exp_alerts": [disagree]},
                {"eval_time": "8m", "alertname": "ReplicasDisagree", "exp_alerts": [disagree]},
                {"eval_time": "9m", "alertname": "ReplicasDisagree", "exp_alerts": []},
            ],
        }],
    })


def test_client_keys_refused_fires_after_a_minute_and_clears_on_the_next_good_file(
        tmp_path: Path) -> None:
    refused = _warning("r1", "The router at r1 refused its tenant keys file and keeps the "
                       "keys it had")
    refused["exp_annotations"]["description"] = (
        "Keys added to the file since do not work yet and keys removed still do. The router's "
        "log says what is wrong with the file.\n")
    _promtool_test(tmp_path, "keys-refused", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'kvroute_client_keys_last_reload_successful{instance="r1"}',
                 "values": "1 1 0 0 0 1 1"},
            ],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "ClientKeysRefused", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "ClientKeysRefused", "exp_alerts": [refused]},
                {"eval_time": "5m", "alertname": "ClientKeysRefused", "exp_alerts": []},
            ],
        }],
    })


def test_fleet_config_refused_fires_after_a_minute_and_clears_on_the_next_good_file(
        tmp_path: Path) -> None:
    refused = _warning("r1", "The router at r1 refused its fleet file and serves the fleet it "
                       "had")
    refused["exp_annotations"]["description"] = (
        "Workers added to the file since take no requests yet and workers removed still do. "
        "The router's log says what is wrong (a field, an unset api_key_env, a routing rule "
        "the new fleet cannot serve).\n")
    _promtool_test(tmp_path, "fleet-refused", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'kvroute_fleet_last_reload_successful{instance="r1"}',
                 "values": "1 1 0 0 0 1 1"},
            ],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "FleetConfigRefused", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "FleetConfigRefused", "exp_alerts": [refused]},
                {"eval_time": "5m", "alertname": "FleetConfigRefused", "exp_alerts": []},
            ],
        }],
    })


def test_routing_config_warnings_fire_after_fifteen_minutes_and_clear_with_a_clean_file(
        tmp_path: Path) -> None:
    """A file cut short as it was saved loaded without its health filter: valid, logged once,
    and seen by no alert."""
    warned = _warning("r1", "The routing config in force at r1 gives 2 warning(s)")
    warned["exp_annotations"]["description"] = (
        "It is valid, but probably not what was meant: a profile that checks neither the "
        "model nor the workers' health, a rule sending a path to a model that cannot serve "
        "it, a limit the fleet cannot reach. GET /debug/routing lists them (so does kvroute "
        "validate FILE --fleet F); a file cut short while it was saved can load with fewer "
        "plugins than were written.\n")
    _promtool_test(tmp_path, "config-warnings", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'kvroute_config_warnings{instance="r1"}',
                 "values": "0 0 2x20 0 0"},
                {"series": 'kvroute_config_warnings{instance="r2"}', "values": "0x25"},
            ],
            "alert_rule_test": [
                {"eval_time": "16m", "alertname": "RoutingConfigWarnings", "exp_alerts": []},
                {"eval_time": "17m", "alertname": "RoutingConfigWarnings",
                 "exp_alerts": [warned]},
                {"eval_time": "24m", "alertname": "RoutingConfigWarnings", "exp_alerts": []},
            ],
        }],
    })


def test_worker_down_fires_when_no_router_reaches_it_for_two_minutes(tmp_path: Path) -> None:
    """A killed worker was shown only on a panel: no alert fired (its routers mark it down
    within a scrape)."""
    down = {"exp_labels": {"severity": "warning", "worker": "l40s-0", "gpu": "L40S-48GB",
                           "model": "m"},
            "exp_annotations": {
                "summary": "l40s-0 (L40S-48GB) is down for every router: its /metrics has not "
                           "answered for 2m",
                "description": "The policy skips it, so the other workers of m take its "
                               "share. /debug/fleet says why (last_error): refused "
                               "connections, timeouts, garbage.\n"}}
    _promtool_test(tmp_path, "worker-down", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [   # two routers; r2 sees it back a minute before r1
                {"series": 'kvroute_worker_up{instance="r1",worker="l40s-0",gpu="L40S-48GB",'
                           'model="m"}', "values": "1 1 0 0 0 0 0 1"},
                {"series": 'kvroute_worker_up{instance="r2",worker="l40s-0",gpu="L40S-48GB",'
                           'model="m"}', "values": "1 1 0 0 0 0 1 1"},
                {"series": 'kvroute_worker_up{instance="r1",worker="h100-0",gpu="H100-80GB",'
                           'model="m"}', "values": "1 0 1 0 1 0 1 1"},
            ],
            "alert_rule_test": [
                {"eval_time": "3m", "alertname": "WorkerDown", "exp_alerts": []},
                {"eval_time": "4m", "alertname": "WorkerDown", "exp_alerts": [down]},
                {"eval_time": "5m", "alertname": "WorkerDown", "exp_alerts": [down]},
                {"eval_time": "6m", "alertname": "WorkerDown", "exp_alerts": []},
            ],
        }],
    })


def test_router_down_fires_a_minute_after_its_scrapes_fail(tmp_path: Path) -> None:
    """With the router gone every alert of its own series went quiet: nothing fired."""
    down = {"exp_labels": {"severity": "emergency", "instance": "router:8000",
                           "job": "kvroute-router"},
            "exp_annotations": {
                "summary": "Prometheus cannot scrape the router at router:8000: its clients "
                           "get no answer from it",
                "description": "Every other alert of this router goes quiet with its series. "
                               "The job name is prometheus.yml's; an installation that names "
                               "the router's job otherwise changes it here.\n"}}
    _promtool_test(tmp_path, "router-down", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'up{job="kvroute-router",instance="router:8000"}',
                 "values": "1 1 0 0 0 1"},
                {"series": 'up{job="vllm-workers",instance="h100-0:8101"}',
                 "values": "1 0 0 0 0 0"},
            ],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "RouterDown", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "RouterDown", "exp_alerts": [down]},
                {"eval_time": "5m", "alertname": "RouterDown", "exp_alerts": []},
            ],
        }],
    })


def test_routing_files_differ_fires_when_replicas_serve_two_contents_for_ten_minutes(
        tmp_path: Path) -> None:
    """Replicas with different routing files said nothing, each judging shared budgets by
    its own limits."""
    differ = {"exp_labels": {"severity": "warning", "job": "kvroute-router"},
              "exp_annotations": {
                  "summary": "The routers of kvroute-router serve 2 different routing files",
                  "description": "Replicas of one deployment route by different policies (and "
                                 "judge shared budgets by different limits) for 10 minutes: a "
                                 "file edited on one host only, or a reload refused on some "
                                 "(RoutingConfigRefused). kvroute_config_info's sha256 label "
                                 "names each content.\n"}}
    info = "kvroute_config_info"
    _promtool_test(tmp_path, "routing-files-differ", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [   # r2 reloads an edit r1 never sees, for 12 minutes
                {"series": f'{info}{{job="kvroute-router",instance="r1",sha256="aaa"}}',
                 "values": "1x30"},
                {"series": f'{info}{{job="kvroute-router",instance="r2",sha256="aaa"}}',
                 "values": "1 1 stale" + " _" * 10 + " 1x17"},
                {"series": f'{info}{{job="kvroute-router",instance="r2",sha256="bbb"}}',
                 "values": "_ _ 1x10 stale"},
            ],
            "alert_rule_test": [
                {"eval_time": "11m", "alertname": "RoutingFilesDiffer", "exp_alerts": []},
                {"eval_time": "12m", "alertname": "RoutingFilesDiffer",
                 "exp_alerts": [differ]},
                {"eval_time": "14m", "alertname": "RoutingFilesDiffer", "exp_alerts": []},
            ],
        }],
    })


def _ttft_series(idle_minutes: int) -> list[dict[str, str]]:
    """An L40S class's streams: ``idle_minutes`` with none, then 10 a minute under 50 ms
    for two hours, then an hour of them between 0.5 and 1 s."""
    bucket = 'kvroute_ttft_seconds_bucket{gpu="L40S", worker="l40s-0", le="%s"}'
    idle = f"0x{idle_minutes} " if idle_minutes else ""
    fast, slow_start = "0+10x120", 1200
    return [
        {"series": bucket % le, "values": f"{idle}{fast} {slow_start}x60"}
        for le in ("0.05", "0.5")] + [
        {"series": bucket % le, "values": f"{idle}{fast} {slow_start + 10}+10x59"}
        for le in ("1", "+Inf")]


@pytest.mark.parametrize("idle_minutes", [0, 30], ids=["traffic-from-the-start",
                                                         "idle-first"])
def test_ttft_above_baseline_fires_after_a_quiet_stretch_too(tmp_path: Path,
                                                               idle_minutes: int) -> None:
    """A GPU class with no stream for five minutes (a quiet night, a new pool) had a NaN
    P99, and one NaN in the day's window made the baseline NaN: the TTFT alerts stayed
    silent for a day. The P99 is recorded only where there were streams."""
    at = 150 + idle_minutes
    _promtool_test(tmp_path, "ttft-baseline", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": _ttft_series(idle_minutes),
            "promql_expr_test": [{
                "expr": "count(gpu:kvroute_ttft_seconds:p99_baseline_avg_1d >= 0)",
                "eval_time": f"{at}m", "exp_samples": [{"labels": "{}", "value": 1}]}],
            "alert_rule_test": [{
                "eval_time": f"{at}m", "alertname": "TtftP99AboveBaseline",
                "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "gpu": "L40S"},
                    "exp_annotations": {"summary": "P99 TTFT on L40S is 995ms, above "
                                                   "baseline + 2 sigma"}}]}],
        }],
    })


def test_one_restart_seen_by_two_routers_is_no_flapping(tmp_path: Path) -> None:
    """Each router exports its own kvroute_worker_up: summed, one restart seen by two
    routers was four flips and paged WorkerFlapping (critical). Three restarts page."""
    up = 'kvroute_worker_up{instance="%s", worker="w0", gpu="L40S", model="m"}'
    once, thrice = "1x20 0x4 1x20", "1x4 0x4 1x4 0x4 1x4 0x4 1x20"
    flapping = {"exp_labels": {"severity": "critical", "worker": "w0", "gpu": "L40S",
                               "model": "m"},
                "exp_annotations": {"summary": "w0 went down or came back 5 times in 10m "
                                               "(OOM or crash loop)"}}
    _promtool_test(tmp_path, "flapping", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": [{"series": up % router, "values": once}
                             for router in ("r0", "r1")],
            "alert_rule_test": [{"eval_time": "7m", "alertname": "WorkerFlapping",
                                 "exp_alerts": []}],
        }, {
            "interval": "15s",
            "input_series": [{"series": up % router, "values": thrice}
                             for router in ("r0", "r1")],
            "alert_rule_test": [{"eval_time": "7m", "alertname": "WorkerFlapping",
                                 "exp_alerts": [flapping]}],
        }],
    })


def test_no_healthy_worker_pages_for_the_router_that_sees_none(tmp_path: Path) -> None:
    """r1 lost its path to the workers and answers its clients 503 while r0 still sees them:
    summed over the routers, the count stayed above 0 and nothing paged."""
    up = 'kvroute_worker_up{instance="%s", worker="%s", gpu="L40S", model="m"}'
    _promtool_test(tmp_path, "no-healthy", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": [
                {"series": up % ("r0", "w0"), "values": "1x20"},
                {"series": up % ("r0", "w1"), "values": "1x20"},
                {"series": up % ("r1", "w0"), "values": "1x4 0x16"},
                {"series": up % ("r1", "w1"), "values": "1x4 0x16"},
            ],
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": "NoHealthyWorker", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "NoHealthyWorker", "exp_alerts": [{
                    "exp_labels": {"severity": "emergency", "model": "m", "instance": "r1"},
                    "exp_annotations": {
                        "summary": "The router at r1 sees no healthy worker serving m",
                        "description": (
                            "Its clients get 503 no_worker_available for that model (other "
                            "routers may still see some: compare their kvroute_worker_up, and "
                            "the routers' network paths).\n")}}]},
            ],
        }],
    })


def test_a_worker_failing_now_and_then_is_warned_of_though_clients_see_no_error(
        tmp_path: Path) -> None:
    """A worker answering 30 % of its attempts with a 503, each retried elsewhere, between
    successes: never ejected (that needs failures in a row), and SuccessRateLow reads what
    clients got (all served): nothing fired. WorkerAnswersFailing warns of it; a worker
    failing 1 % of its attempts does not cross the threshold."""
    requests, retries = "kvroute_requests_total", "kvroute_retries_total"
    description = (
        "Retried on other workers, its clients may see none of these (SuccessRateLow reads what "
        "they got); failing now and then, it is never set aside (WorkerEjected needs failures "
        'in a row). Its log and kvroute_requests_total{status=~"5.."} say which.\n')
    _promtool_test(tmp_path, "worker-failing", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": f'{requests}{{model="m", worker="w0", status="200"}}',
                 "values": "0+70x30"},
                {"series": f'{requests}{{model="m", worker="w0", status="503"}}',
                 "values": "0+30x30"},
                {"series": f'{retries}{{model="m", worker="w0", reason="http_5xx"}}',
                 "values": "0+30x30"},
                {"series": f'{requests}{{model="m", worker="w1", status="200"}}',
                 "values": "0+600x30"},
                {"series": f'{requests}{{model="m", worker="w2", status="200"}}',
                 "values": "0+99x30"},
                {"series": f'{requests}{{model="m", worker="w2", status="500"}}',
                 "values": "0+1x30"},
                {"series": f'{retries}{{model="m", worker="w2", reason="http_5xx"}}',
                 "values": "0+1x30"},
            ],
            "alert_rule_test": [
                {"eval_time": "20m", "alertname": "SuccessRateLow", "exp_alerts": []},
                {"eval_time": "20m", "alertname": "WorkerAnswersFailing", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "worker": "w0"},
                    "exp_annotations": {
                        "summary": "w0 answered 30% of its attempts with a server error over "
                                   "5m", "description": description}}]},
            ],
        }],
    })


def test_client_success_counts_the_routers_own_server_errors(tmp_path: Path) -> None:
    """A rule pinning a tenant to a pool that does not serve its model answered every one of
    its requests 503 no_worker_available (worker="", its profile named) while every worker
    was up: the ratio read 1 and nothing paged. Refusals before routing (profile="none":
    admission's 429 and 503, a bad body) stay out: RouterShedsLoad tells of those."""
    requests = "kvroute_requests_total"
    _promtool_test(tmp_path, "client-success-router-5xx", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                # m1: 90 answers a minute from workers, 10 no_worker_available from the router
                {"series": f'{requests}{{model="m1", worker="w0", profile="p", status="200"}}',
                 "values": "0+90x20"},
                {"series": f'{requests}{{model="m1", worker="", profile="p", status="503"}}',
                 "values": "0+10x20"},
                # m2: 100 answers, 5 shed by admission (RouterShedsLoad's)
                {"series": f'{requests}{{model="m2", worker="w1", profile="p", status="200"}}',
                 "values": "0+100x20"},
                {"series": f'{requests}{{model="m2", worker="", profile="none", status="503"}}',
                 "values": "0+5x20"},
                # m3: nothing but the router's 503s (no worker answer at all)
                {"series": f'{requests}{{model="m3", worker="", profile="p", status="503"}}',
                 "values": "0+10x20"},
            ],
            "promql_expr_test": [{
                "expr": "model:kvroute_client_success:ratio5m", "eval_time": "10m",
                "exp_samples": [{"labels": 'model:kvroute_client_success:ratio5m{model="m1"}',
                                 "value": 0.9},
                                {"labels": 'model:kvroute_client_success:ratio5m{model="m2"}',
                                 "value": 1},
                                {"labels": 'model:kvroute_client_success:ratio5m{model="m3"}',
                                 "value": 0}]}],
        }],
    })


def test_ttft_baseline_waits_for_an_hour_of_history(tmp_path: Path) -> None:
    """A baseline of the first minutes (a fresh Prometheus, a new pool) had a standard
    deviation near 0, and the first slower minutes paged TtftP99FarAboveBaseline."""
    bucket = 'kvroute_ttft_seconds_bucket{gpu="L40S", worker="l40s-0", le="%s"}'
    series = [{"series": bucket % le, "values": "0+10x20 200x30"} for le in ("0.05", "0.5")]
    series += [{"series": bucket % le, "values": "0+10x20 210+10x29"} for le in ("1", "+Inf")]
    _promtool_test(tmp_path, "ttft-warm-up", {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [{
                "expr": "count(gpu:kvroute_ttft_seconds:p99_baseline_avg_1d) or vector(0)",
                "eval_time": "40m", "exp_samples": [{"labels": "{}", "value": 0}]}],
            "alert_rule_test": [
                {"eval_time": "40m", "alertname": "TtftP99AboveBaseline", "exp_alerts": []},
                {"eval_time": "40m", "alertname": "TtftP99FarAboveBaseline",
                 "exp_alerts": []}],
        }],
    })
