"""Every Prometheus metric of the router, in one class built per app (no global registry).

Call sites use the ``record_*`` methods; they never touch metric objects. Worker gauges
(``kvroute_worker_*``) are computed at scrape time from the live worker views, so they are
always exactly what the policies saw last. The series updated per request live in lock-free
loop metrics (``router.loop_metrics``), the others in ``prometheus_client`` metrics; both
render through the same registry, in declaration order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from policies.base import API_OF_PATH, Decision, RequestOutcome
from policies.candidates import scores_of
from policies.engine import PolicyEngine
from router.estimate_metrics import EstimateCollector
from router.exposition import render_without_created
from router.gc_pauses import GENERATIONS
from router.label_values import DEFAULT_TENANT_LABELS, BoundedLabelValues
from router.loop_metrics import (
    CounterCell,
    HistogramCell,
    LoopCounter,
    LoopHistogram,
    LoopMetricsCollector,
)
from router.output_length_metrics import OutputLengthCollector
from router.pool_demand import pool_demand
from router.protocol import (
    COUNT_TOKENS_PATH,
    DETOKENIZE_PATH,
    RESPONSES_PATH,
    TOKENIZE_PATH,
    TRANSCRIPTIONS_PATH,
    TRANSLATIONS_PATH,
)
from router.state.store import StateStore
from router.state_store_metrics import StateStoreCollector
from workers.models import WorkerInfo, WorkerView

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
TPOT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                1.0, 2.5, 5.0)
# a request from its arrival at the router to its last byte: seconds to many minutes
CLIENT_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0,
                           300.0, 600.0)
DECISION_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
                    0.1)
# young collections take a tenth of a millisecond to a few, full ones milliseconds to seconds
GC_PAUSE_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0)
# a fluent loop wakes within a millisecond; a stall is tens of milliseconds to seconds
LOOP_LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CLASSIFY_BUCKETS = (1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0)
SCORE_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
# the ``api`` label of the request series: the routed paths' APIs (``API_OF_PATH``: chat,
# completions, embeddings, responses, messages, score, rerank, pooling, classify), these
# paths' own names, "responses" for a stored response's paths, else "other"
UTILITY_APIS = {TOKENIZE_PATH: "tokenize", DETOKENIZE_PATH: "detokenize",
                COUNT_TOKENS_PATH: "count-tokens", TRANSCRIPTIONS_PATH: "transcriptions",
                TRANSLATIONS_PATH: "translations"}
OTHER_API = "other"
RESPONSES_API = "responses"


def api_of_path(path: str) -> str:
    """The ``api`` label of a request to ``path``."""
    api = API_OF_PATH.get(path) or UTILITY_APIS.get(path)
    if api is not None:
        return api
    return RESPONSES_API if path.startswith(RESPONSES_PATH + "/") else OTHER_API
ADMISSION_WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# the semantic producer's outcomes (``policies.semantic.producer``): all but the first give
# the request the default class
ADMISSION_REJECTION_REASONS = ("requests_per_minute", "tokens_per_minute", "tenant_in_flight",
                               "queue_full", "wait_timeout", "draining")
SEMANTIC_OUTCOMES = ("classified", "unsure", "empty", "error", "timeout", "overloaded")
# generated / predicted output tokens: 1 is exact, below 1 the prediction was too long. Fine
# around 1, where good predictions fall: with one (0.8, 1.25] bucket, exact predictions read
# as p10 0.84 and p90 1.20, an interpolation inside it
PREDICTION_RATIO_BUCKETS = (0.0625, 0.125, 0.25, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1,
                            1.25, 1.5, 2.0, 4.0, 8.0, 16.0)
# the ``model`` label of requests for a model no worker serves: the name is the client's
# choice, so it never becomes a label value (one series per invented name)
UNKNOWN_MODEL = "(unknown)"
# the retries after an attempt counted as a 5xx (``router.proxy.RetryableUpstream``'s reasons
# less model_not_found, a 404), whose series every worker has from the start
COUNTED_FROM_START_RETRY_REASONS = ("connect", "disconnect", "http_5xx", "redirect")

ViewSource = Callable[[], Sequence[WorkerView]]
# (the workers ejected after failures, the workers stalled), now
SetAsideSource = Callable[[], tuple[Collection[str], Collection[str]]]
_Loop = TypeVar("_Loop", LoopCounter, LoopHistogram)
_Key = TypeVar("_Key", bound=tuple[str, ...])


class _WorkerCollector(Collector):
    """Renders ``kvroute_worker_*`` gauges from the current worker views."""

    def __init__(self, views: ViewSource) -> None:
        self._views = views

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily("kvroute_worker_up", "1 if the worker is healthy.",
                               labels=["worker", "gpu", "model"])
        kv = GaugeMetricFamily("kvroute_worker_kv_usage", "KV-cache usage (0..1).",
                               labels=["worker", "gpu", "model"])
        reqs = GaugeMetricFamily("kvroute_worker_requests",
                                 "Requests running and waiting (scraped) and in flight (router).",
                                 labels=["worker", "gpu", "model", "state"])
        for view in self._views():
            labels = [view.id, view.gpu.name, view.info.models[0]]
            up.add_metric(labels, 1.0 if view.healthy else 0.0)
            kv.add_metric(labels, view.kv_usage)
            reqs.add_metric([*labels, "running"], float(view.running))
            reqs.add_metric([*labels, "waiting"], float(view.waiting))
            reqs.add_metric([*labels, "inflight"], float(view.inflight_requests))
        return [up, kv, reqs]


class _SetAsideCollector(Collector):
    """Renders ``kvroute_worker_set_aside``: 1 while the router passes a worker over, by
    why (``ejected`` after failed requests, ``stalled`` with a request overdue), else 0."""

    def __init__(self, views: ViewSource, set_aside: SetAsideSource) -> None:
        self._views = views
        self._set_aside = set_aside

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily(
            "kvroute_worker_set_aside", "1 while the router sends the worker nothing: ejected "
            "after failed requests, or stalled with a request overdue (reason).",
            labels=["worker", "gpu", "model", "reason"])
        ejected, stalled = self._set_aside()
        for view in self._views():
            labels = [view.id, view.gpu.name, view.info.models[0]]
            gauge.add_metric([*labels, "ejected"], 1.0 if view.id in ejected else 0.0)
            gauge.add_metric([*labels, "stalled"], 1.0 if view.id in stalled else 0.0)
        return [gauge]


class _PoolDemandCollector(Collector):
    """Renders ``kvroute_pool_demand_*`` autoscaling gauges per pool and model."""

    def __init__(self, views: ViewSource) -> None:
        self._views = views

    def collect(self) -> Iterable[Metric]:
        labels = ["pool", "model"]
        queued = GaugeMetricFamily("kvroute_pool_demand_queued_tokens", "Tokens dispatched "
                                   "and not yet served (prefill not started + decode left).",
                                   labels=labels)
        kv = GaugeMetricFamily("kvroute_pool_demand_kv_usage",
                               "Mean KV-cache usage of the pool's healthy workers (0..1).",
                               labels=labels)
        waiting = GaugeMetricFamily("kvroute_pool_demand_waiting_requests",
                                    "Requests waiting at the pool's workers.", labels=labels)
        healthy = GaugeMetricFamily("kvroute_pool_demand_healthy_workers",
                                    "Healthy workers in the pool.", labels=labels)
        for demand in pool_demand(self._views()):
            key = [demand.pool, demand.model]
            queued.add_metric(key, float(demand.queued_tokens))
            kv.add_metric(key, demand.kv_usage)
            waiting.add_metric(key, float(demand.waiting_requests))
            healthy.add_metric(key, float(demand.healthy_workers))
        return [queued, kv, waiting, healthy]


class _ConfigCollector(Collector):
    """Renders ``kvroute_config_info{sha256}``: which routing file content is in force, and
    ``kvroute_config_warnings``: how many warnings it gives against the fleet in force."""

    def __init__(self, fingerprint: Callable[[], str | None],
                 warnings: Callable[[], int] | None) -> None:
        self._fingerprint = fingerprint
        self._warnings = warnings

    def collect(self) -> Iterable[Metric]:
        info = GaugeMetricFamily(
            "kvroute_config_info", "1, labelled with the first 12 hex digits of the SHA-256 of "
            "the routing file content in force: replicas that differ serve different "
            "policies (alert RoutingFilesDiffer).", labels=["sha256"])
        fingerprint = self._fingerprint()
        if fingerprint is not None:
            info.add_metric([fingerprint], 1.0)
        if self._warnings is None:
            return [info]
        warnings = GaugeMetricFamily(
            "kvroute_config_warnings", "Warnings the routing config in force gives against the "
            "fleet in force, as /debug/routing lists them (valid, but probably unintended: a "
            "profile that checks no health, a rule to a model that cannot serve a path; "
            "alert RoutingConfigWarnings).", value=float(self._warnings()))
        return [info, warnings]


class _FoldedLabelsCollector(Collector):
    """Renders ``kvroute_label_values_folded_total``: requests counted under ``(other)``."""

    def __init__(self, labels: Sequence[BoundedLabelValues]) -> None:
        self._labels = tuple(labels)

    def collect(self) -> Iterable[Metric]:
        folded = CounterMetricFamily(
            "kvroute_label_values_folded", "Requests counted under the label value (other): "
            "the label's bounded set of values was full, or the value was too long or not "
            "printable.",
            labels=["label"])
        for bounded in self._labels:
            folded.add_metric([bounded.name], float(bounded.folded))
        return [folded]


def _drop_keys(children: dict[_Key, Any], position: int, value: str) -> None:
    """Drop the cached children whose label at ``position`` is ``value``."""
    for key in [key for key in children if key[position] == value]:
        del children[key]


@dataclass(frozen=True, slots=True)
class _WorkerSeries:
    ttft: HistogramCell
    tpot: HistogramCell
    prompt_tokens: CounterCell
    completion_tokens: CounterCell
    cached_tokens: CounterCell


class RouterMetrics:
    """The router's metrics on their own ``CollectorRegistry``."""

    def __init__(self, views: ViewSource | None = None,
                 tenant_labels: int = DEFAULT_TENANT_LABELS) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # the process's memory, CPU, open files and Python version (process_*, python_info),
        # as every Prometheus client exports them: the runbooks compare memory with GC time
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)

        def loop(metric: _Loop) -> _Loop:
            r.register(LoopMetricsCollector([metric]))
            return metric

        self.requests = loop(LoopCounter("kvroute_requests", "Answers: each attempt at a worker (a "
                                         "retried one too) by its status, and each request "
                                         "refused before one (worker empty).",
                                         ["model", "worker", "gpu", "profile", "status",
                                          "api"]))
        self.decision_duration = loop(LoopHistogram(
            "kvroute_decision_duration_seconds",
            "Time to decide (rules, filters, scorers, picker).", buckets=DECISION_BUCKETS))
        self.gc_pause = loop(LoopHistogram(
            "kvroute_gc_pause_seconds",
            "Garbage collections of the router process (the event loop stands still), by "
            "generation.", ["generation"], buckets=GC_PAUSE_BUCKETS))
        for generation in GENERATIONS:              # every series shown from the start
            self.gc_pause.labels(generation)
        self.loop_lag = loop(LoopHistogram(
            "kvroute_event_loop_lag_seconds",
            "How late the router's event loop ran a timer due every 100 ms: how long a "
            "callback, a collection or a parse held it, every request waiting.",
            buckets=LOOP_LAG_BUCKETS))
        self.decisions = loop(LoopCounter(
            "kvroute_decisions", "Routing decisions.",
            ["profile", "rule", "worker", "gpu", "reason", "class"]))
        self.ttft = loop(LoopHistogram("kvroute_ttft_seconds",
                                       "Time to first token seen by the router.",
                                       ["worker", "gpu"], buckets=TTFT_BUCKETS))
        # what the client waited: from the request's arrival at the router, its body read,
        # admission waits and failed attempts included (kvroute_ttft_seconds: one attempt's)
        self.client_ttft = loop(LoopHistogram(
            "kvroute_client_ttft_seconds", "Streams: from the request's arrival at the router "
            "to its first token relayed to the client (admission wait and failed attempts "
            "included).", ["model", "api"], buckets=TTFT_BUCKETS))
        self.client_duration = loop(LoopHistogram(
            "kvroute_client_duration_seconds", "Requests answered 200: from their arrival at "
            "the router to their last byte relayed (admission wait and failed attempts "
            "included).", ["model", "api"], buckets=CLIENT_DURATION_BUCKETS))
        self.tpot = loop(LoopHistogram("kvroute_tpot_seconds",
                                       "Mean time per output token after the first.",
                                       ["worker", "gpu"], buckets=TPOT_BUCKETS))
        self.prompt_tokens = loop(LoopCounter("kvroute_prompt_tokens", "Prompt tokens served.",
                                              ["worker", "gpu"]))
        self.completion_tokens = loop(LoopCounter("kvroute_completion_tokens",
                                                  "Tokens generated.", ["worker", "gpu"]))
        self.cached_tokens = loop(LoopCounter(
            "kvroute_cached_tokens", "Prompt tokens served from the worker's prefix cache.",
            ["worker", "gpu"]))
        self.retries = loop(LoopCounter("kvroute_retries", "Requests retried on another worker, "
                                        "by the worker whose attempt failed and the model.",
                                        ["worker", "reason", "model"]))
        self.ejections = Counter("kvroute_worker_ejections",
                                 "Workers set aside after consecutive failed requests.",
                                 ["worker"], registry=r)
        self.stalls = Counter("kvroute_worker_stalls",
                              "Times a worker was set aside with a request waiting past its "
                              "deadline for a first byte.", ["worker"], registry=r)
        # as the blackbox exporter's probe_ssl_earliest_cert_expiry, per https:// worker
        self.worker_certificate_expiry = Gauge(
            "kvroute_worker_tls_cert_expiry_timestamp_seconds",
            "When the certificate an https:// worker last presented expires (Unix time).",
            ["worker"], registry=r)
        self.config_reloads = Counter("kvroute_config_reloads", "Routing config reloads.",
                                      ["result"], registry=r)
        for result in ("success", "failure"):        # at 0: a first refusal shows in increase()
            self.config_reloads.labels(result)
        self.fleet_reloads = Counter(
            "kvroute_fleet_reloads", "Reloads of the fleet file (workers added, removed or "
            "declared anew while the router runs).", ["result"], registry=r)
        for result in ("success", "failure"):
            self.fleet_reloads.labels(result)
        self.fleet_last_reload_successful = Gauge(
            "kvroute_fleet_last_reload_successful",
            "Whether the last read of the fleet file succeeded (0: it was refused and the "
            "fleet in force keeps serving).", registry=r)
        self.fleet_last_reload_successful.set(1)
        self.serving_certificate_reloads = Counter(
            "kvroute_serving_certificate_reloads", "Loads of a renewed HTTPS certificate "
            "(--ssl-certfile) while the router runs (failure: the one in force kept serving).",
            ["result"], registry=r)
        for result in ("success", "failure"):
            self.serving_certificate_reloads.labels(result)
        self.client_keys_reloads = Counter(
            "kvroute_client_keys_reloads", "Reloads of the tenant keys file (--api-keys-file).",
            ["result"], registry=r)
        # exported only while a tenant keys file is in use (watch_client_keys): at its
        # default 0 it fired ClientKeysRefused on every router without one
        self.client_keys_last_reload_successful: Gauge | None = None
        # as Prometheus's own prometheus_config_last_reload_*: the file on disk is (1) or is
        # not (0) the config in force, and since when the one in force was loaded
        self.config_last_reload_successful = Gauge(
            "kvroute_config_last_reload_successful",
            "Whether the last load of the routing file succeeded (0: it was refused and the "
            "last good config serves).", registry=r)
        self.config_last_reload_success_time = Gauge(
            "kvroute_config_last_reload_success_timestamp_seconds",
            "When the routing config in force was loaded.", registry=r)
        self.cost = loop(LoopCounter("kvroute_cost_dollars", "Estimated cost of served requests.",
                                     ["gpu", "worker", "tenant"]))
        self.semantic_class = Counter("kvroute_semantic_class", "Requests by semantic class.",
                                      ["class"], registry=r)
        self.semantic_outcomes = Counter(
            "kvroute_semantic_outcomes", "Requests the semantic producer saw, by outcome: "
            "classified, or given the default class for being unsure, empty, an error, a "
            "timeout or an overloaded encoder.", ["outcome"], registry=r)
        for outcome in SEMANTIC_OUTCOMES:
            self.semantic_outcomes.labels(outcome)
        self.semantic_classify = Histogram("kvroute_semantic_classify_seconds",
                                           "Time to classify a request.",
                                           buckets=CLASSIFY_BUCKETS, registry=r)
        self.output_prediction_ratio = loop(LoopHistogram(
            "kvroute_output_tokens_predicted_ratio",
            "Tokens generated over the output length the decision predicted (requests the "
            "output-length producer predicted for): 1 is exact, below 1 predicted too long.",
            ["model"], buckets=PREDICTION_RATIO_BUCKETS))
        self.plugin_failures = loop(LoopCounter(
            "kvroute_plugin_failures", "Plugins (producers, filters, scorers, pickers) that "
            "failed in a decision and were skipped (a picker: replaced by the best total).",
            ["profile", "plugin"]))
        self.winner_score = loop(LoopHistogram(
            "kvroute_decision_winner_score", "Each scorer's score (0..1) of the chosen worker.",
            ["profile", "scorer"], buckets=SCORE_BUCKETS))
        self.prefix_ceiling_hit_tokens = Counter(
            "kvroute_prefix_ceiling_hit_tokens", "Prompt tokens an infinite prefix cache shared "
            "by the whole fleet would have served (leading blocks seen before).", registry=r)
        self.prefix_ceiling_query_tokens = Counter(
            "kvroute_prefix_ceiling_query_tokens", "Prompt tokens looked up in the infinite "
            "prefix cache.", registry=r)
        self.prefix_known_chosen_tokens = Counter(
            "kvroute_prefix_known_chosen_tokens", "Prompt tokens the router believed the "
            "chosen worker had cached (first attempts of decisions with a prefix scorer), by "
            "the decision's deciding term.", ["reason"], registry=r)
        self.prefix_known_best_tokens = Counter(
            "kvroute_prefix_known_best_tokens", "Prompt tokens the router believed the "
            "best-placed candidate had cached (the same decisions), by the decision's deciding "
            "term.", ["reason"], registry=r)
        self._admission_tenants: set[str] = set()       # tenant labels whose series exist
        self.admission_rejections = Counter(
            "kvroute_admission_rejections", "Requests refused before routing by the routing "
            "file's admission section: a tenant's budget spent (requests_per_minute, "
            "tokens_per_minute), its cap on requests at once reached (tenant_in_flight) "
            "or the in-flight limit's queue (queue_full, wait_timeout, "
            "draining: waiting when the router began to stop).",
            ["reason", "tenant"], registry=r)
        self.admission_wait = Histogram(
            "kvroute_admission_wait_seconds", "Time requests waited for an in-flight slot "
            "(those let through; 0 when none was waited for).", buckets=ADMISSION_WAIT_BUCKETS,
            registry=r)
        self.admission_in_flight = Gauge(
            "kvroute_admission_in_flight", "Requests this router process is serving (admitted "
            "and not yet answered).", registry=r)
        self.admission_waiting = Gauge(
            "kvroute_admission_waiting", "Requests waiting for an in-flight slot.", registry=r)
        self.tenants = BoundedLabelValues("tenant", tenant_labels)
        r.register(_FoldedLabelsCollector([self.tenants]))
        if views is not None:
            r.register(_WorkerCollector(views))
            r.register(_PoolDemandCollector(views))
        # labelled children cached by label values: ``labels()`` is slow on the request path
        self._request_children: dict[tuple[str, ...], CounterCell] = {}
        self._decision_children: dict[tuple[str, ...], CounterCell] = {}
        self._worker_children: dict[tuple[str, str], _WorkerSeries] = {}
        self._score_children: dict[tuple[str, str], HistogramCell] = {}
        self._prefix_children: dict[str, tuple[Counter, Counter]] = {}
        self._prediction_children: dict[str, HistogramCell] = {}

    def render(self) -> bytes:
        return render_without_created(self.registry)

    def record_decision(self, decision: Decision, gpu: str, reason_code: str,
                        semantic_class: str | None, seconds: float) -> None:
        self.decision_duration.observe(seconds)
        key = (decision.profile, decision.rule or "", decision.worker_id or "", gpu, reason_code,
               semantic_class or "")
        child = self._decision_children.get(key)
        if child is None:
            child = self._decision_children[key] = self.decisions.labels(*key)
        child.inc()
        skipped = decision.attributes.get("skipped_plugins")
        if skipped:
            self._record_plugin_failures(decision.profile, skipped)
        self._record_winner_scores(decision)

    def _record_plugin_failures(self, profile: str, skipped: object) -> None:
        if not isinstance(skipped, (tuple, list)):
            return
        for plugin in skipped:
            self.plugin_failures.labels(profile, str(plugin)).inc()

    def _record_winner_scores(self, decision: Decision) -> None:
        if decision.worker_id is None:
            return
        scores = scores_of(decision.candidates, decision.worker_id)
        if scores is None:
            return
        for scorer, score in scores.items():
            key = (decision.profile, scorer)
            child = self._score_children.get(key)
            if child is None:
                child = self._score_children[key] = self.winner_score.labels(*key)
            child.observe(score)

    def record_prefix_ceiling(self, hit_tokens: int, query_tokens: int) -> None:
        self.prefix_ceiling_hit_tokens.inc(hit_tokens)
        self.prefix_ceiling_query_tokens.inc(query_tokens)

    def record_prefix_choice(self, chosen_tokens: int, best_tokens: int, reason: str) -> None:
        children = self._prefix_children.get(reason)
        if children is None:
            children = self._prefix_children[reason] = (
                self.prefix_known_chosen_tokens.labels(reason),
                self.prefix_known_best_tokens.labels(reason))
        children[0].inc(chosen_tokens)
        children[1].inc(best_tokens)

    def record_request(self, model: str, worker: str, gpu: str, profile: str,
                       status: int, api: str) -> None:
        """One answer (``api``: ``api_of_path`` of its path)."""
        key = (model, worker, gpu, profile, str(status), api)
        child = self._request_children.get(key)
        if child is None:
            child = self._request_children[key] = self.requests.labels(*key)
        child.inc()

    def record_client_ttft(self, model: str, api: str, seconds: float) -> None:
        self.client_ttft.labels(model, api).observe(seconds)

    def record_client_duration(self, model: str, api: str, seconds: float) -> None:
        self.client_duration.labels(model, api).observe(seconds)

    def record_unauthorized(self, path: str) -> None:
        """A request to ``path`` refused for its API key, before anything of it was read."""
        self.record_request(UNKNOWN_MODEL, "", "", "none", 401, api_of_path(path))

    def watch_set_aside(self, views: ViewSource, set_aside: SetAsideSource) -> None:
        """Render ``kvroute_worker_set_aside`` for ``views`` from ``set_aside()`` at each
        scrape."""
        self.registry.register(_SetAsideCollector(views, set_aside))

    def watch_admission(self, in_flight: Callable[[], float],
                        waiting: Callable[[], float]) -> None:
        """Read the admission gauges from these at each scrape."""
        self.admission_in_flight.set_function(in_flight)
        self.admission_waiting.set_function(waiting)

    def admission_tenant_seen(self, tenant: str | None) -> None:
        """A request of ``tenant`` met an admission section: its rejection series start at 0,
        so that the first refusals show in ``increase()`` (a series born at 1 shows none,
        and RouterShedsLoad read 0 for 8 of 24 requests shed)."""
        label = self.tenants.label(tenant or "", count=False)   # the request counts later
        if label not in self._admission_tenants:
            self._admission_tenants.add(label)
            for reason in ADMISSION_REJECTION_REASONS:
                self.admission_rejections.labels(reason, label)

    def record_admission_rejection(self, reason: str, tenant: str | None, model: str,
                                   status: int, api: str) -> None:
        """A request refused by admission: counted by reason and tenant, and as answered."""
        self.admission_rejections.labels(reason, self.tenants.label(tenant or "")).inc()
        self.record_request(model, "", "", "none", status, api)

    def record_outcome(self, outcome: RequestOutcome, gpu: str, tenant: str | None,
                       cost_usd: float | None) -> None:
        worker = outcome.worker_id
        series = self._worker_children.get((worker, gpu))
        if series is None:
            series = self._worker_children[(worker, gpu)] = _WorkerSeries(
                self.ttft.labels(worker, gpu), self.tpot.labels(worker, gpu),
                self.prompt_tokens.labels(worker, gpu),
                self.completion_tokens.labels(worker, gpu),
                self.cached_tokens.labels(worker, gpu))
        if outcome.ttft_s is not None:
            series.ttft.observe(outcome.ttft_s)
        if outcome.tpot_s is not None:
            series.tpot.observe(outcome.tpot_s)
        if outcome.prompt_tokens:
            series.prompt_tokens.inc(outcome.prompt_tokens)
        if outcome.completion_tokens:
            series.completion_tokens.inc(outcome.completion_tokens)
        if outcome.cached_tokens:
            series.cached_tokens.inc(outcome.cached_tokens)
        if cost_usd:
            self.cost.labels(gpu, worker, self.tenants.label(tenant or "")).inc(cost_usd)

    def record_output_prediction(self, model: str, predicted_tokens: int,
                                 completion_tokens: int) -> None:
        """A finished request the output-length producer had predicted for."""
        if predicted_tokens < 1 or completion_tokens < 1:
            return
        child = self._prediction_children.get(model)
        if child is None:
            child = self._prediction_children[model] = self.output_prediction_ratio.labels(model)
        child.observe(completion_tokens / predicted_tokens)

    def record_retry(self, worker: str, reason: str, model: str) -> None:
        """A request of ``model`` is sent on to another worker after its attempt at
        ``worker`` failed for ``reason`` (that attempt is in ``kvroute_requests_total``)."""
        self.retries.labels(worker, reason, model).inc()

    def watch_estimates(self, engine: Callable[[], PolicyEngine]) -> None:
        """Render the ``kvroute_estimate_*`` series (``router.estimate_metrics``) from the
        engine in force, ``engine()`` at each scrape."""
        self.registry.register(EstimateCollector(engine))

    def watch_state_store(self, store: StateStore) -> None:
        """Render the ``kvroute_state_store_*`` series (``router.state_store_metrics``)."""
        self.registry.register(StateStoreCollector(store))

    def watch_output_lengths(self, engine: Callable[[], PolicyEngine]) -> None:
        """Render the ``kvroute_output_length_*`` series (``router.output_length_metrics``)
        from the engine in force, ``engine()`` at each scrape."""
        self.registry.register(OutputLengthCollector(engine))

    def start_worker_counts(self, workers: Iterable[WorkerInfo]) -> None:
        """Each worker's ejection and stall counts at 0, and its retries after a failed answer
        for each model it declares, so the first is an increase: ``rate()`` takes none from a
        series first seen at 6, and the client success ratio subtracting the retries from the
        5xx answers read a first burst of retried failures as clients' errors."""
        for worker in workers:
            self.ejections.labels(worker.id)
            self.stalls.labels(worker.id)
            for model in worker.models:
                for reason in COUNTED_FROM_START_RETRY_REASONS:
                    self.retries.labels(worker.id, reason, model)

    def record_serving_certificate_reload(self, succeeded: bool) -> None:
        self.serving_certificate_reloads.labels("success" if succeeded else "failure").inc()

    def record_fleet_reload(self, succeeded: bool) -> None:
        self.fleet_reloads.labels("success" if succeeded else "failure").inc()
        self.fleet_last_reload_successful.set(1 if succeeded else 0)

    def forget_worker(self, worker: str) -> None:
        """A reloaded fleet file removed the worker or declared it another server: every
        series of its label goes (a fleet whose workers take new ids, autoscaled pods, kept
        some sixty series per id ever seen, for the life of the process), counts of its
        last scrape interval with them; what the TSDB scraped stays there."""
        for metric in (self.requests, self.decisions, self.ttft, self.tpot, self.prompt_tokens,
                       self.completion_tokens, self.cached_tokens, self.retries, self.cost):
            metric.remove_where("worker", worker)
        for labelled in (self.worker_certificate_expiry, self.ejections, self.stalls):
            with contextlib.suppress(KeyError):
                labelled.remove(worker)
        _drop_keys(self._request_children, 1, worker)
        _drop_keys(self._decision_children, 2, worker)
        _drop_keys(self._worker_children, 0, worker)

    def model_names(self) -> set[str]:
        """The model names the series kept are labelled with (less ``UNKNOWN_MODEL``)."""
        names: set[str] = set()
        for metric in (self.requests, self.client_ttft, self.client_duration,
                       self.output_prediction_ratio, self.retries):
            names |= metric.label_values("model")
        names.discard(UNKNOWN_MODEL)
        return names

    def forget_model(self, model: str) -> None:
        """No worker serves the model any more (an adapter unloaded everywhere): every
        series of its label goes, as a departed worker's do (``router.model_retirement``)."""
        for metric in (self.requests, self.client_ttft, self.client_duration,
                       self.output_prediction_ratio, self.retries):
            metric.remove_where("model", model)
        _drop_keys(self._request_children, 0, model)
        self._prediction_children.pop(model, None)

    def record_certificate(self, worker: str, not_after: float) -> None:
        """The certificate a worker presented on a new TLS connection (its expiry)."""
        self.worker_certificate_expiry.labels(worker).set(not_after)

    def record_stall(self, worker: str) -> None:
        self.stalls.labels(worker).inc()

    def record_ejection(self, worker: str, seconds: float) -> None:
        """``router.ejection``'s report (``seconds``, how long it is set aside, is in its log
        line, not in a series)."""
        self.ejections.labels(worker).inc()

    def record_config_loaded(self) -> None:
        """The routing file was read (at start, or a reload swapped it in): in force now."""
        self.config_last_reload_successful.set(1)
        self.config_last_reload_success_time.set_to_current_time()

    def watch_config(self, fingerprint: Callable[[], str | None],
                     warnings: Callable[[], int] | None = None) -> None:
        """Render ``kvroute_config_info`` from ``fingerprint()`` and ``kvroute_config_warnings``
        from ``warnings()`` (when given) at each scrape."""
        self.registry.register(_ConfigCollector(fingerprint, warnings))

    def record_reload(self, result: str, rebuilt: bool = True) -> None:
        """A reload attempt; ``rebuilt`` False: the file came back to the config in force,
        whose load time stands."""
        self.config_reloads.labels(result).inc()
        if result != "success":
            self.config_last_reload_successful.set(0)
        elif rebuilt:
            self.record_config_loaded()
        else:
            self.config_last_reload_successful.set(1)

    def watch_client_keys(self) -> Gauge:
        """A tenant keys file is in use: its reload gauge is exported, at 1 (it was read at
        start)."""
        if self.client_keys_last_reload_successful is None:
            self.client_keys_last_reload_successful = Gauge(
                "kvroute_client_keys_last_reload_successful",
                "Whether the last read of the tenant keys file succeeded (0: it was refused "
                "and the keys in force stay); absent without a keys file.",
                registry=self.registry)
            self.client_keys_last_reload_successful.set(1)
            for result in ("success", "failure"):
                self.client_keys_reloads.labels(result)
        return self.client_keys_last_reload_successful

    def record_client_keys_reload(self, succeeded: bool) -> None:
        self.client_keys_reloads.labels("success" if succeeded else "failure").inc()
        self.watch_client_keys().set(1 if succeeded else 0)

    def record_semantic(self, semantic_class: str | None, seconds: float | None,
                        outcome: str | None = None) -> None:
        if semantic_class:
            self.semantic_class.labels(semantic_class).inc()
        if outcome in SEMANTIC_OUTCOMES:
            self.semantic_outcomes.labels(outcome).inc()
        if seconds is not None:
            self.semantic_classify.observe(seconds)
