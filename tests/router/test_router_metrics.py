"""Router metrics: exact names and labels, per-app registries, worker gauges from views."""

from __future__ import annotations

import time
from dataclasses import replace
from types import MappingProxyType

from policies.base import Decision, RequestOutcome
from router.metrics import RouterMetrics, api_of_path
from workers.engine.profiles import BUILTIN_GPUS, BUILTIN_MODELS
from workers.models import WorkerInfo, WorkerView

INFO = WorkerInfo(id="w1", url="http://127.0.0.1:1", gpu=BUILTIN_GPUS["h100"], models=("m",),
                  model_spec=BUILTIN_MODELS["llama-3-8b"], price_per_hour=3.0)
VIEW = WorkerView(info=INFO, running=2, waiting=3, kv_usage=0.5, block_size=16,
                  num_gpu_blocks=100, max_model_len=8192, inflight_requests=4,
                  inflight_tokens=10, healthy=True, staleness_s=0.1)


def test_records_under_the_agreed_names() -> None:
    metrics = RouterMetrics(lambda: [VIEW])
    gpu = INFO.gpu.name
    decision = Decision(request_id="r", worker_id="w1", model="m", profile="p", rule=None,
                        reason="x", attributes=MappingProxyType({"decided_by": "kv-usage"}))
    metrics.record_decision(decision, gpu, "kv-usage", "code", 0.0002)
    metrics.record_request("m", "w1", gpu, "p", 200, "chat")
    metrics.record_request("m", "w1", gpu, "p", 200, "chat")
    metrics.record_request("m", "w1", gpu, "p", 200, "rerank")
    metrics.record_outcome(RequestOutcome("r", "w1", 200, prompt_tokens=10, completion_tokens=5,
                                          cached_tokens=4, ttft_s=0.05, tpot_s=0.01),
                           gpu, "acme", 0.002)
    metrics.record_retry("w1", "connect", "m")
    metrics.record_reload("failure")
    metrics.record_semantic("code", 0.003)
    get = metrics.registry.get_sample_value
    assert [get("kvroute_requests_total", {"model": "m", "worker": "w1", "gpu": gpu,
                                           "profile": "p", "status": "200", "api": api})
            for api in ("chat", "rerank")] == [2.0, 1.0]
    assert get("kvroute_decisions_total", {"profile": "p", "rule": "", "worker": "w1",
                                           "gpu": gpu, "reason": "kv-usage",
                                           "class": "code"}) == 1.0
    assert get("kvroute_decision_duration_seconds_count", {}) == 1.0
    labels = {"worker": "w1", "gpu": gpu}
    assert get("kvroute_ttft_seconds_count", labels) == 1.0
    assert get("kvroute_tpot_seconds_sum", labels) == 0.01
    assert get("kvroute_prompt_tokens_total", labels) == 10.0
    assert get("kvroute_completion_tokens_total", labels) == 5.0
    assert get("kvroute_cached_tokens_total", labels) == 4.0
    assert get("kvroute_cost_dollars_total", {"gpu": gpu, "worker": "w1",
                                              "tenant": "acme"}) == 0.002
    assert get("kvroute_retries_total", {"worker": "w1", "reason": "connect",
                                         "model": "m"}) == 1.0
    assert get("kvroute_config_reloads_total", {"result": "failure"}) == 1.0
    assert get("kvroute_config_last_reload_successful", {}) == 0.0
    assert get("kvroute_semantic_class_total", {"class": "code"}) == 1.0
    assert get("kvroute_semantic_classify_seconds_count", {}) == 1.0
    worker = {"worker": "w1", "gpu": gpu, "model": "m"}
    assert get("kvroute_worker_up", worker) == 1.0
    assert get("kvroute_worker_kv_usage", worker) == 0.5
    assert [get("kvroute_worker_requests", {**worker, "state": s})
            for s in ("running", "waiting", "inflight")] == [2.0, 3.0, 4.0]
    text = metrics.render().decode()
    assert "# TYPE kvroute_requests_total counter" in text


def test_each_app_has_its_own_registry() -> None:
    one, two = RouterMetrics(), RouterMetrics()
    one.record_reload("success")
    assert one.registry.get_sample_value("kvroute_config_reloads_total",
                                         {"result": "success"}) == 1.0
    assert two.registry.get_sample_value("kvroute_config_reloads_total",
                                         {"result": "success"}) == 0.0


def test_tenants_beyond_the_limit_are_counted_as_other() -> None:
    metrics = RouterMetrics(tenant_labels=2)
    gpu = INFO.gpu.name
    for tenant in ("acme", "globex", "initech", "umbrella", "acme", None):
        metrics.record_outcome(RequestOutcome("r", "w1", 200), gpu, tenant, 0.5)
    get = metrics.registry.get_sample_value

    def spent(tenant: str) -> float | None:
        return get("kvroute_cost_dollars_total", {"gpu": gpu, "worker": "w1", "tenant": tenant})

    assert [spent(t) for t in ("acme", "globex", "(other)", "")] == [1.0, 0.5, 1.0, 0.5]
    assert spent("initech") is None and spent("umbrella") is None
    assert get("kvroute_label_values_folded_total", {"label": "tenant"}) == 2.0


def test_a_file_back_to_the_config_in_force_keeps_its_load_time() -> None:
    """A refused edit undone is a success without a rebuild: the config in force was loaded
    when it was, so its timestamp stays (it moved to the undo's time)."""
    metrics = RouterMetrics()
    get = metrics.registry.get_sample_value
    metrics.record_config_loaded()
    loaded = get("kvroute_config_last_reload_success_timestamp_seconds", {})
    metrics.record_reload("failure")
    time.sleep(0.01)      # the clock moves on before the undo
    metrics.record_reload("success", rebuilt=False)
    assert get("kvroute_config_last_reload_successful", {}) == 1.0
    assert get("kvroute_config_last_reload_success_timestamp_seconds", {}) == loaded
    metrics.record_reload("success")
    assert get("kvroute_config_last_reload_success_timestamp_seconds", {}) > loaded


def test_semantic_outcomes_are_counted_by_kind() -> None:
    """Requests given the default class for a timeout or an overloaded encoder were counted
    as that class, like any other: nothing told them apart."""
    from typing import get_args

    from policies.semantic.model import Outcome
    from router.metrics import SEMANTIC_OUTCOMES

    assert get_args(Outcome) == SEMANTIC_OUTCOMES
    metrics = RouterMetrics()
    metrics.record_semantic("chat", 0.3, "timeout")
    metrics.record_semantic("code", 0.01, "classified")
    metrics.record_semantic("chat", 0.0, "made-up")          # not a label value
    get = metrics.registry.get_sample_value
    assert {o: get("kvroute_semantic_outcomes_total", {"outcome": o})
            for o in SEMANTIC_OUTCOMES} == {"classified": 1.0, "unsure": 0.0, "empty": 0.0,
                                            "error": 0.0, "timeout": 1.0, "overloaded": 0.0}
    assert get("kvroute_semantic_class_total", {"class": "chat"}) == 2.0


def test_a_refused_tenant_keys_file_shows_in_the_metrics() -> None:
    """It showed only in the log: a key pushed for a new customer that never took could not
    be alerted on."""
    metrics = RouterMetrics()
    get = metrics.registry.get_sample_value
    # no file: no series (at 0 it fired ClientKeysRefused on every router without a file)
    assert get("kvroute_client_keys_last_reload_successful", {}) is None
    assert "kvroute_client_keys_last_reload_successful" not in metrics.render().decode()
    metrics.watch_client_keys()
    assert get("kvroute_client_keys_last_reload_successful", {}) == 1.0
    assert get("kvroute_client_keys_reloads_total", {"result": "failure"}) == 0.0
    metrics.record_client_keys_reload(False)
    assert get("kvroute_client_keys_last_reload_successful", {}) == 0.0
    assert get("kvroute_client_keys_reloads_total", {"result": "failure"}) == 1.0
    metrics.record_client_keys_reload(True)
    assert get("kvroute_client_keys_last_reload_successful", {}) == 1.0


def test_the_process_own_metrics_are_exported() -> None:
    """A runbook said to compare process_resident_memory_bytes, which was not exported."""
    metrics = RouterMetrics()
    get = metrics.registry.get_sample_value
    assert (get("process_resident_memory_bytes", {}) or 0) > 10_000_000
    assert (get("process_open_fds", {}) or 0) > 0
    assert get("process_cpu_seconds_total", {}) is not None
    assert "python_info{" in metrics.render().decode()


def test_exact_output_predictions_fall_in_a_narrow_bucket_at_one() -> None:
    """With one (0.8, 1.25] bucket, 97 % exact predictions read as p10 0.84 / p90 1.20."""
    metrics = RouterMetrics()
    for generated in (100, 100, 100, 97, 103):
        metrics.record_output_prediction("m", 100, generated)
    get = metrics.registry.get_sample_value
    name = "kvroute_output_tokens_predicted_ratio_bucket"
    assert get(name, {"model": "m", "le": "0.95"}) == 0.0
    assert get(name, {"model": "m", "le": "1.0"}) == 4.0
    assert get(name, {"model": "m", "le": "1.05"}) == 5.0


def test_refusal_series_start_at_zero_so_their_first_increase_shows() -> None:
    """Born at 1 on its first refusal, a series shows no increase() for it: RouterShedsLoad
    read 0 while 8 of 24 requests were shed, and a first refused reload showed nothing."""
    metrics = RouterMetrics()
    get = metrics.registry.get_sample_value
    assert get("kvroute_config_reloads_total", {"result": "failure"}) == 0.0
    assert get("kvroute_admission_rejections_total",
               {"reason": "queue_full", "tenant": "acme"}) is None
    metrics.admission_tenant_seen("acme")
    for reason in ("requests_per_minute", "tokens_per_minute", "queue_full", "wait_timeout"):
        assert get("kvroute_admission_rejections_total",
                   {"reason": reason, "tenant": "acme"}) == 0.0


def test_the_routing_file_in_force_is_named_by_its_fingerprint() -> None:
    fingerprint = ["abc123def456"]
    metrics = RouterMetrics()
    metrics.watch_config(lambda: fingerprint[0])
    get = metrics.registry.get_sample_value
    assert get("kvroute_config_info", {"sha256": "abc123def456"}) == 1.0
    fingerprint[0] = "0123456789ab"                  # reloaded: the new content alone
    assert get("kvroute_config_info", {"sha256": "abc123def456"}) is None
    assert get("kvroute_config_info", {"sha256": "0123456789ab"}) == 1.0
    assert get("kvroute_config_warnings") is None      # not watched


def test_the_warnings_of_the_routing_config_in_force_are_a_gauge() -> None:
    warnings = [0]
    metrics = RouterMetrics()
    metrics.watch_config(lambda: "abc123def456", lambda: warnings[0])
    get = metrics.registry.get_sample_value
    assert get("kvroute_config_warnings") == 0.0
    warnings[0] = 2                                   # reloaded: a file that gives two
    assert get("kvroute_config_warnings") == 2.0


def test_a_tenant_meeting_the_admission_section_is_not_counted_as_folded_twice() -> None:
    """kvroute_label_values_folded_total counts requests under (other): the admission
    section's lookup of a tenant past the limit counted each such request once more."""
    metrics = RouterMetrics(tenant_labels=1)
    metrics.admission_tenant_seen("acme")             # takes the one label
    metrics.admission_tenant_seen("globex")           # past the limit: (other), not counted
    assert metrics.tenants.folded == 0
    metrics.record_outcome(RequestOutcome("r", "w1", 200), INFO.gpu.name, "globex", 0.1)
    assert metrics.tenants.folded == 1                # the request, once


def test_each_path_is_counted_under_its_api() -> None:
    """The ``api`` label tells the routed APIs apart (a rerank from an embedding of the
    same model), the utility paths by their own names, a stored response's paths as
    "responses", and any other path as "other"."""
    assert [api_of_path(path) for path in (
        "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses",
        "/v1/messages", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank",
        "/pooling", "/classify", "/tokenize", "/detokenize", "/v1/messages/count_tokens",
        "/v1/responses/resp_1", "/v1/responses/resp_1/cancel", "/v1/nothing")] == [
        "chat", "completions", "embeddings", "responses", "messages", "score", "score",
        "rerank", "rerank", "rerank", "pooling", "classify", "tokenize", "detokenize",
        "count-tokens", "responses", "responses", "other"]
    metrics = RouterMetrics()
    metrics.record_client_duration("m", "rerank", 0.5)
    metrics.record_client_ttft("m", "chat", 0.1)
    metrics.record_unauthorized("/v1/embeddings")
    get = metrics.registry.get_sample_value
    assert get("kvroute_client_duration_seconds_count", {"model": "m", "api": "rerank"}) == 1
    assert get("kvroute_client_ttft_seconds_count", {"model": "m", "api": "chat"}) == 1
    assert get("kvroute_requests_total", {"model": "(unknown)", "worker": "", "gpu": "",
                                          "profile": "none", "status": "401",
                                          "api": "embeddings"}) == 1


def test_a_worker_forgotten_takes_every_series_of_its_label() -> None:
    """A worker that left the fleet kept some sixty series for the life of the process."""
    metrics = RouterMetrics()
    gpu = INFO.gpu.name
    for worker in ("w1", "w2"):
        decision = Decision(request_id="r", worker_id=worker, model="m", profile="p",
                            rule=None, reason="x", attributes=MappingProxyType({}))
        metrics.record_decision(decision, gpu, "load", None, 0.0001)
        metrics.record_request("m", worker, gpu, "p", 200, "chat")
        metrics.record_outcome(RequestOutcome("r", worker, 200, prompt_tokens=10,
                                              completion_tokens=5, cached_tokens=4,
                                              ttft_s=0.05, tpot_s=0.01), gpu, "acme", 0.002)
        metrics.record_retry(worker, "connect", "m")
        metrics.record_certificate(worker, 1e9)
    metrics.start_worker_counts([INFO, replace(INFO, id="w2")])
    metrics.record_ejection("w1", 10.0)
    metrics.record_stall("w1")

    def labelled(worker: str) -> set[str]:
        return {sample.name for family in metrics.registry.collect()
                for sample in family.samples if sample.labels.get("worker") == worker}

    before = labelled("w2")
    assert len(labelled("w1")) > 15 and labelled("w1") == before     # names of series
    metrics.forget_worker("w1")
    assert labelled("w1") == set() and labelled("w2") == before
    metrics.record_request("m", "w1", gpu, "p", 200, "chat")     # counted afresh if it returns
    assert metrics.registry.get_sample_value("kvroute_requests_total", {
        "model": "m", "worker": "w1", "gpu": gpu, "profile": "p", "status": "200",
        "api": "chat"}) == 1


def test_a_forgotten_model_loses_every_series_of_its_label() -> None:
    """Adapters loaded, used and unloaded at run time left some 43 series each for good."""
    metrics = RouterMetrics()
    for model in ("base", "fin"):
        metrics.record_request(model, "w1", "H100", "p", 200, "chat")
        metrics.record_client_ttft(model, "chat", 0.1)
        metrics.record_client_duration(model, "chat", 0.5)
        metrics.record_output_prediction(model, 40, 50)
        metrics.record_retry("w1", "connect", model)
    metrics.record_request("(unknown)", "", "", "none", 404, "chat")

    def labelled(model: str) -> set[str]:
        return {sample.name for family in metrics.registry.collect()
                for sample in family.samples if sample.labels.get("model") == model}

    assert metrics.model_names() == {"base", "fin"}
    before = labelled("base")
    assert len(labelled("fin")) > 10 and labelled("fin") == before     # names of series
    metrics.forget_model("fin")
    assert labelled("fin") == set() and labelled("base") == before
    assert metrics.model_names() == {"base"}
    metrics.record_request("fin", "w1", "H100", "p", 200, "chat")    # afresh if it returns
    assert metrics.registry.get_sample_value("kvroute_requests_total", {
        "model": "fin", "worker": "w1", "gpu": "H100", "profile": "p", "status": "200",
        "api": "chat"}) == 1


def test_plugins_skipped_in_a_decision_are_counted_by_profile_and_plugin() -> None:
    """Only a picker's failure showed (as its reason code): a filter, scorer or producer
    raising on every request was in the log alone, which no alert reads."""
    metrics = RouterMetrics()
    failing = Decision(request_id="r", worker_id="w1", model="m", profile="default",
                       rule=None, reason="r",
                       attributes=MappingProxyType({"skipped_plugins": ("zone", "kv")}))
    metrics.record_decision(failing, "H100-80GB", "load", None, 1e-4)
    metrics.record_decision(failing, "H100-80GB", "load", None, 1e-4)
    fine = Decision(request_id="r2", worker_id="w1", model="m", profile="default", rule=None,
                    reason="r")
    metrics.record_decision(fine, "H100-80GB", "load", None, 1e-4)
    get = metrics.registry.get_sample_value
    assert get("kvroute_plugin_failures_total", {"profile": "default", "plugin": "zone"}) == 2
    assert get("kvroute_plugin_failures_total", {"profile": "default", "plugin": "kv"}) == 2
