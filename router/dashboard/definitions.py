"""kvroute's three Grafana dashboards: routing decisions, fleet, cost and tenants.

Queries filter by the template variables ``$model``, ``$gpu`` and ``$worker`` and use
``$__rate_interval``. Router series carry ``worker``/``gpu`` (and ``model`` where it applies);
vLLM series carry ``model_name`` plus the ``worker`` target label of the Prometheus scrape
config, and are filtered by worker only (``$worker`` already follows ``$gpu``). SLO lines and
alert thresholds come from the ``kvroute:slo:*`` and ``kvroute:threshold:*`` recording rules
(config/prometheus/recording.yml). Regenerate the JSON files with ``kvroute dashboard build``.
"""

from __future__ import annotations

from router.dashboard.spec import Dashboard, Panel, Query

RI = "$__rate_interval"
WG = 'gpu=~"$gpu", worker=~"$worker"'             # router series with worker and gpu
MWG = f'model=~"$model", {WG}'                    # router series with a model label too
MWG_ROUTED = f'{MWG}, worker!=""'                  # … of requests that reached a worker
VLLM = 'model_name=~"$model", worker=~"$worker"'  # vLLM series (worker is a target label)


def _rate(metric: str, selector: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}{{{selector}}}[{RI}]))"


def _quantile(q: float, metric: str, selector: str, by: str) -> str:
    return (f"histogram_quantile({q}, sum by ({by}, le) "
            f"(rate({metric}_bucket{{{selector}}}[{RI}])))")


def _decisions_by(label: str, title: str) -> Panel:
    return Panel(f"Decisions/s by {title}",
                 (Query(_rate("kvroute_decisions_total", WG, label), f"{{{{{label}}}}}"),),
                 unit="reqps", stacked=True, width=8,
                 description=f"Routing decisions per second, split by {title}.")


ROUTING = Dashboard(
    uid="kvroute-routing", title="kvroute / Routing decisions", file_name="routing.json",
    description="Why traffic goes where it goes: deciding terms, rules, profiles, semantic "
                "classes, prefix affinity against the infinite-cache ceiling, winning scores.",
    panels=(
        _decisions_by("reason", "deciding term"),
        _decisions_by("rule", "rule"),
        _decisions_by("profile", "profile"),
        _decisions_by("class", "semantic class"),
        _decisions_by("gpu", "GPU class"),
        Panel("Traffic share per worker", (Query(
            # (refused requests have no worker: an empty one, which Grafana's All matches)
            f"{_rate('kvroute_requests_total', MWG_ROUTED, 'worker')} / scalar("
            f"sum(rate(kvroute_requests_total{{{MWG_ROUTED}}}[{RI}])))", "{{worker}}"),),
            unit="percentunit", stacked=True, width=8,
            description="Share of answered requests each worker served."),
        Panel("Prefix cache hit rate vs infinite-cache ceiling", (
            Query(f"sum(rate(vllm:prefix_cache_hits_total{{{VLLM}}}[{RI}])) / "
                  f"sum(rate(vllm:prefix_cache_queries_total{{{VLLM}}}[{RI}]))",
                  "workers' prefix cache hits"),
            Query(f"sum(rate(kvroute_prefix_ceiling_hit_tokens_total[{RI}])) / "
                  f"sum(rate(kvroute_prefix_ceiling_query_tokens_total[{RI}]))",
                  "infinite-cache ceiling", reference_line=True),
            Query(f"sum(rate(kvroute_prefix_known_best_tokens_total[{RI}])) / "
                  f"sum(rate(kvroute_prefix_ceiling_query_tokens_total[{RI}]))",
                  "known cached on the best candidate"),
            Query(f"sum(rate(kvroute_prefix_known_chosen_tokens_total[{RI}])) / "
                  f"sum(rate(kvroute_prefix_ceiling_query_tokens_total[{RI}]))",
                  "known cached on the chosen worker")),
            unit="percentunit",
            description="Prompt tokens served from the workers' prefix caches (vLLM "
                        "prefix_cache_hits / queries) against what one infinite cache shared by "
                        "the whole fleet would have served: the gap is what routing lost. The "
                        "two 'known' lines are the router's own belief at each decision: the "
                        "most any candidate held, and what the chosen worker held; the gap "
                        "between them is what the decisions passed over."),
        Panel("Winning scores (mean, per scorer)", (Query(
            "sum by (scorer) (rate(kvroute_decision_winner_score_sum[" + RI + "])) / "
            "sum by (scorer) (rate(kvroute_decision_winner_score_count[" + RI + "]))",
            "{{scorer}}"),), unit="short",
            description="Mean score (0..1) each scorer gave the worker that was chosen."),
        Panel("Decision latency", (
            Query(f"histogram_quantile(0.5, sum by (le) (rate("
                  f"kvroute_decision_duration_seconds_bucket[{RI}])))", "p50"),
            Query(f"histogram_quantile(0.99, sum by (le) (rate("
                  f"kvroute_decision_duration_seconds_bucket[{RI}])))", "p99")),
            unit="s", description="Time to run rules, filters, scorers and the picker."),
        Panel("Event loop stopped for garbage collection", (Query(
            "sum by (generation) (rate(kvroute_gc_pause_seconds_sum[" + RI + "]))",
            "generation {{generation}}"),), unit="percentunit", stacked=True,
            description="Share of the time the router process spent in garbage collections, "
                        "by generation (0: young objects; 2: a full collection, which walks "
                        "every live container). Its event loop serves no one meanwhile; "
                        "kvroute_gc_pause_seconds has each collection's duration."),
        Panel("Event loop lag", (
            Query(f"histogram_quantile(0.99, sum by (le) (rate("
                  f"kvroute_event_loop_lag_seconds_bucket[{RI}])))", "p99"),
            Query("sum(rate(kvroute_event_loop_lag_seconds_sum[" + RI + "])) / "
                  "sum(rate(kvroute_event_loop_lag_seconds_count[" + RI + "]))", "mean")),
            unit="s",
            description="How late the router's event loop ran a timer due every 100 ms: "
                        "how long whatever held it (a large body parsed, a collection, a "
                        "plugin) made every request wait. Near 0 when fluent."),
        Panel("Output length: generated / predicted", tuple(
            Query(_quantile(q, "kvroute_output_tokens_predicted_ratio", 'model=~"$model"',
                            "model"), f"p{round(q * 100)} {{{{model}}}}")
            for q in (0.1, 0.5, 0.9)), unit="short",
            description="Tokens each answer generated over the length the output-length "
                        "producer predicted when it was routed (1: exact; below 1: predicted "
                        "too long, so the estimates were pessimistic). Only requests with a "
                        "prediction count: none before min_samples have finished."),
        Panel("Time estimates: error of the raw model and its correction", (Query(
            "avg by (profile, metric, estimate) (kvroute_estimate_error)",
            "{{profile}} {{metric}} {{estimate}}"),), unit="short",
            description="Mean |ln(observed / estimated)| of TTFT and TPOT over the recent "
                        "finished requests (0.1 is about 10 % off), of the raw model and of "
                        "the online correction the estimates apply. A raw error rising alone "
                        "is a fleet drifting from its GPU profiles, absorbed by the "
                        "correction."),
        Panel("Retries/s by worker and reason", (Query(
            _rate("kvroute_retries_total", 'worker=~"$worker"', "worker, reason"),
            "{{worker}} {{reason}}"),), unit="reqps",
            description="Requests retried on another worker after a connect error or a 5xx "
                        "before the first byte, by the worker that failed."),
        Panel("Workers down or set aside", (
            Query(f'sum by (gpu) (max by (worker, gpu) (1 - kvroute_worker_up{{{MWG}}}))',
                  "{{gpu}} down"),
            Query(f'max by (worker, reason) (kvroute_worker_set_aside{{{MWG}}})',
                  "{{worker}} {{reason}}")), unit="short", stacked=True,
            description="Workers a router marked down (failed scrapes), per GPU class; and "
                        "workers set aside while it lasts, healthy as their scrapes are: "
                        "ejected after failing request after request (kvroute serve "
                        "--eject-after), or stalled with a request past its deadline for a "
                        "first byte (--stall-after). Each worker counted once, however many "
                        "routers see it."),
    ))

FLEET = Dashboard(
    uid="kvroute-fleet", title="kvroute / Fleet", file_name="fleet.json",
    description="Load, KV cache, preemptions (vLLM's own metrics), latency against the SLO, "
                "throughput and the autoscaling demand signals.",
    panels=(
        Panel("Running requests per worker", (Query(
            f"sum by (worker) (vllm:num_requests_running{{{VLLM}}})", "{{worker}}"),),
            width=8),
        Panel("Waiting requests per worker", (Query(
            f"sum by (worker) (vllm:num_requests_waiting{{{VLLM}}})", "{{worker}}"),),
            width=8),
        Panel("KV cache usage per worker", (
            Query(f"max by (worker) (vllm:kv_cache_usage_perc{{{VLLM}}})", "{{worker}}"),
            Query("kvroute:threshold:kv_usage_warning", "warning threshold",
                  reference_line=True)),
            unit="percentunit", width=8),
        Panel("Preemptions/s per worker", (Query(
            _rate("vllm:num_preemptions_total", VLLM, "worker"), "{{worker}}"),),
            unit="short", width=8),
        Panel("Worker up", (Query(f"kvroute_worker_up{{{MWG}}}", "{{worker}}"),),
              kind="stat", width=8),
        Panel("Files in force", (
            Query("kvroute_config_last_reload_successful", "routing {{instance}}"),
            Query("kvroute_fleet_last_reload_successful", "fleet {{instance}}")),
            kind="stat", width=8,
            description="1 while each router serves the file on disk; 0 after it refused an "
                        "edit (its log says why) and serves the last good one: workers added "
                        "since take no requests, a routing change is not applied. Alerts "
                        "RoutingConfigRefused, FleetConfigRefused (and ClientKeysRefused for "
                        "a tenant keys file)."),
        Panel("Router replicas sharing state", (
            Query("kvroute_state_store_replicas", "replicas seen by {{instance}}"),
            Query("kvroute_state_store_degraded", "{{instance}} without Redis")),
            unit="short", width=8,
            description="How many replicas each router shares state with through Redis "
                        "(itself included: 1 alone); 1 on the second line while its Redis is "
                        "away. Routers that disagree are not on the same Redis database."),
        Panel("Tokens/s in and out", (
            Query(_rate("kvroute_prompt_tokens_total", WG, "gpu"), "in {{gpu}}"),
            Query(_rate("kvroute_completion_tokens_total", WG, "gpu"), "out {{gpu}}")),
            unit="short", width=8),
        Panel("TTFT p50 / p99 per GPU class", (
            Query(_quantile(0.5, "kvroute_ttft_seconds", WG, "gpu"), "p50 {{gpu}}"),
            Query(_quantile(0.99, "kvroute_ttft_seconds", WG, "gpu"), "p99 {{gpu}}"),
            Query("kvroute:slo:ttft_seconds", "SLO", reference_line=True)),
            unit="s", description="Time to first token seen by the router."),
        Panel("TPOT p50 / p99 per GPU class", (
            Query(_quantile(0.5, "kvroute_tpot_seconds", WG, "gpu"), "p50 {{gpu}}"),
            Query(_quantile(0.99, "kvroute_tpot_seconds", WG, "gpu"), "p99 {{gpu}}"),
            Query("kvroute:slo:tpot_seconds", "SLO", reference_line=True)),
            unit="s", description="Mean time per output token after the first."),
        Panel("What clients waited, per model", (
            Query(_quantile(0.5, "kvroute_client_ttft_seconds", 'model=~"$model"', "model"),
                  "TTFT p50 {{model}}"),
            Query(_quantile(0.99, "kvroute_client_ttft_seconds", 'model=~"$model"', "model"),
                  "TTFT p99 {{model}}"),
            Query(_quantile(0.99, "kvroute_client_duration_seconds", 'model=~"$model"',
                            "model"), "whole answer p99 {{model}}"),
            Query("kvroute:slo:ttft_seconds", "SLO", reference_line=True)),
            unit="s", description="From each request's arrival at the router: its wait for "
                                  "an in-flight slot and failed attempts included (the "
                                  "panels above time one attempt at a worker). TTFT of "
                                  "streams; whole answers of requests answered 200."),
        Panel("Pool demand: queued tokens", (Query(
            'sum by (pool) (max by (pool, model) '
            '(kvroute_pool_demand_queued_tokens{model=~"$model"}))',
            "{{pool}}"),), width=8,
            description="Autoscaling signal: tokens dispatched and not yet served. Each "
                        "router exports the whole fleet's (replicas sharing a Redis add "
                        "each other's), so the routers' series are not added up."),
        Panel("Pool demand: waiting requests", (Query(
            'sum by (pool) (max by (pool, model) '
            '(kvroute_pool_demand_waiting_requests{model=~"$model"}))',
            "{{pool}}"),), width=8),
        Panel("Pool demand: KV usage", (Query(
            'max by (pool) (kvroute_pool_demand_kv_usage{model=~"$model"})', "{{pool}}"),),
            unit="percentunit", width=8),
    ))

_TOKENS = "kvroute_prompt_tokens_total", "kvroute_completion_tokens_total"


def _per_mtok(by: str) -> str:
    tokens = " + ".join(_rate(m, WG, by) for m in _TOKENS)
    return f"{_rate('kvroute_cost_dollars_total', WG, by)} / ({tokens}) * 1e6"


COST = Dashboard(
    uid="kvroute-cost", title="kvroute / Cost and tenants", file_name="cost.json",
    description="Estimated spend of served requests (price x estimated GPU-seconds, from the "
                "cost scorer) per hour and per million tokens, by GPU class, worker, tenant.",
    panels=(
        Panel("$/hour by GPU class", (Query(
            f"{_rate('kvroute_cost_dollars_total', WG, 'gpu')} * 3600", "{{gpu}}"),),
            unit="currencyUSD", stacked=True, width=8),
        Panel("$/hour by worker", (Query(
            f"{_rate('kvroute_cost_dollars_total', WG, 'worker')} * 3600", "{{worker}}"),),
            unit="currencyUSD", stacked=True, width=8),
        Panel("$/hour by tenant", (Query(
            f"{_rate('kvroute_cost_dollars_total', WG, 'tenant')} * 3600", "{{tenant}}"),),
            unit="currencyUSD", stacked=True, width=8),
        Panel("$/Mtok by GPU class", (Query(_per_mtok("gpu"), "{{gpu}}"),),
              unit="currencyUSD"),
        Panel("$/Mtok by worker", (Query(_per_mtok("worker"), "{{worker}}"),),
              unit="currencyUSD"),
        Panel("Tenant share of spend", (Query(
            f"{_rate('kvroute_cost_dollars_total', WG, 'tenant')} / scalar("
            f"sum(rate(kvroute_cost_dollars_total{{{WG}}}[{RI}])))", "{{tenant}}"),),
            unit="percentunit", stacked=True),
        Panel("Attempts/s by HTTP status", (Query(
            _rate("kvroute_requests_total", 'model=~"$model"', "status"), "{{status}}"),),
            unit="reqps", stacked=True,
            description="Answers by HTTP status, every attempt counted (errors before routing "
                        "included, under the model (unknown) when the model was): a request "
                        "retried on another worker shows its failed attempt (the worker's 5xx, "
                        "or 502) beside the answer its client got. What clients saw: the "
                        "recording rule model:kvroute_client_success:ratio5m (alert "
                        "SuccessRateLow)."),
        Panel("Requests/s by API", (Query(
            _rate("kvroute_requests_total", 'model=~"$model"', "api"), "{{api}}"),),
            unit="reqps", stacked=True,
            description="Answered requests by what their path serves: chat, completions, "
                        "responses, messages, embeddings, score, rerank, pooling, classify, "
                        "tokenize, … (errors before routing included)."),
        Panel("Refused by admission, by tenant and reason", (Query(
            f"sum by (tenant, reason) (rate(kvroute_admission_rejections_total[{RI}]))",
            "{{tenant}} {{reason}}"),),
            unit="reqps", stacked=True,
            description="Requests refused before routing by the routing file's admission "
                        "section: 429 for a spent budget (requests_per_minute, "
                        "tokens_per_minute) or a tenant at its max_in_flight "
                        "(tenant_in_flight), 503 for want of an in-flight slot (queue_full, "
                        "wait_timeout)."),
        Panel("Admission: in flight and waiting", (
            Query("sum by (instance) (kvroute_admission_in_flight)", "in flight {{instance}}"),
            Query("sum by (instance) (kvroute_admission_waiting)", "waiting {{instance}}")),
            unit="short",
            description="Requests each router process serves, and those waiting for one of "
                        "its admission.max_in_flight slots."),
    ))

DASHBOARDS: tuple[Dashboard, ...] = (ROUTING, FLEET, COST)
