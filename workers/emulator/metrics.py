"""vLLM's ``/metrics`` for one emulated worker: exact names, types, labels, help and buckets.

Every app builds its own ``CollectorRegistry`` (several workers share one process). Durations
are emulated (unscaled) seconds, so a worker run ten times faster than real time reports the
same latencies it would report in real time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from workers.emulator.config import EmulatorConfig
from workers.engine.api import EngineStats, RequestStats

REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                           50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
NUM_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
LABELS = ("model_name", "engine")
VLLM_VERSION = "0.33.0"


def request_tokens_buckets(max_model_len: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 series up to ``max_model_len``."""
    buckets: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            value = m * scale
            if value > max_model_len:
                return tuple(buckets)
            buckets.append(float(value))
        scale *= 10


@dataclass(slots=True)
class _Parent:
    """The choices of one prompt of ``n`` > 1, as vLLM's ``ParentRequest`` tracks them."""

    left: int                   # choices not finished yet
    most: int = 0               # the most tokens a finished choice generated
    finished: bool = False      # one of them finished (not only aborted)


class EmulatorMetrics:
    """All metric families of one worker, registered in their own registry."""

    def __init__(self, config: EmulatorConfig, num_gpu_blocks: int, max_model_len: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._labels = {"model_name": config.model_name, "engine": "0"}
        reg, lab = self.registry, LABELS

        # Children without extra labels exist from the start (value 0), as in vLLM.
        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
            metric = Gauge(name, doc, (*lab, *extra), registry=reg)
            if not extra:
                metric.labels(**self._labels)
            return metric

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            metric = Counter(name, doc, (*lab, *extra), registry=reg)
            if not extra:
                metric.labels(**self._labels)
            return metric

        def histogram(name: str, doc: str, buckets: Iterable[float]) -> Histogram:
            metric = Histogram(name, doc, lab, buckets=tuple(buckets), registry=reg)
            metric.labels(**self._labels)
            return metric

        self.running = gauge("vllm:num_requests_running",
                             "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting",
                             "Number of requests waiting to be processed.")
        self.waiting_by_reason = gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
            "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            ("reason",))
        sleep = gauge("vllm:engine_sleep_state",
                      "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means "
                      "engine is awake; weights_offloaded = 1 means sleep level 1; "
                      "discard_all = 1 means sleep level 2.", ("sleep_state",))
        for state, value in (("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0)):
            sleep.labels(**self._labels, sleep_state=state).set(value)
        self.kv_usage = gauge("vllm:kv_cache_usage_perc",
                              "KV-cache usage. 1 means 100 percent usage.")
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_hits = counter("vllm:prefix_cache_hits",
                                   "Prefix cache hits, in terms of number of cached tokens.")
        for name, doc in (
                ("vllm:external_prefix_cache_queries", "External prefix cache queries from KV "
                 "connector cross-instance cache sharing, in terms of number of queried tokens."),
                ("vllm:external_prefix_cache_hits", "External prefix cache hits from KV "
                 "connector cross-instance cache sharing, in terms of number of cached tokens."),
                ("vllm:mm_cache_queries",
                 "Multi-modal cache queries, in terms of number of queried items."),
                ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached "
                 "items.")):
            counter(name, doc)
        self.cached_by_source = counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
            "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.", ("source",))
        for tier in ("device", "host", "p2p", "disk", "external_unspecified"):
            self.cached_by_source.labels(**self._labels, source=tier)
        # no engine label, as vLLM's
        self.admission_rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ("model_name", "reason"), registry=reg)
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
            self.admission_rejections.labels(model_name=config.model_name, reason=reason)
        self.preemptions = counter("vllm:num_preemptions",
                                   "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.prompt_by_source = counter("vllm:prompt_tokens_by_source",
                                        "Number of prompt tokens by source.", ("source",))
        self.prompt_cached = counter("vllm:prompt_tokens_cached",
                                     "Number of cached prompt tokens (local + external).")
        self.generation_tokens = counter("vllm:generation_tokens",
                                         "Number of generation tokens processed.")
        self.success = counter("vllm:request_success",
                               "Count of successfully processed requests.", ("finished_reason",))
        for reason in FINISHED_REASONS:
            self.success.labels(**self._labels, finished_reason=reason)
        for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
            self.prompt_by_source.labels(**self._labels, source=source)
        tokens = request_tokens_buckets(max_model_len)
        self.req_prompt_tokens = histogram("vllm:request_prompt_tokens",
                                           "Number of prefill tokens processed.", tokens)
        self.req_generation_tokens = histogram("vllm:request_generation_tokens",
                                               "Number of generation tokens processed.", tokens)
        self.iteration_tokens = histogram("vllm:iteration_tokens_total",
                                          "Histogram of number of tokens per engine_step.",
                                          ITERATION_TOKENS_BUCKETS)
        self.req_max_gen_tokens = histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.", tokens)
        self.params_n = histogram("vllm:request_params_n", "Histogram of the n request parameter.",
                                  PARAMS_N_BUCKETS)
        self.params_max_tokens = histogram("vllm:request_params_max_tokens",
                                           "Histogram of the max_tokens request parameter.",
                                           tokens)
        self.ttft = histogram("vllm:time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.itl = histogram("vllm:inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.tpot = histogram("vllm:request_time_per_output_token_seconds",
                              "Histogram of time_per_output_token_seconds per request.",
                              ITL_BUCKETS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds",
                             "Histogram of e2e request latency in seconds.",
                             REQUEST_LATENCY_BUCKETS)
        self.queue_time = histogram("vllm:request_queue_time_seconds",
                                    "Histogram of time spent in WAITING phase for request.",
                                    REQUEST_LATENCY_BUCKETS)
        self.inference_time = histogram("vllm:request_inference_time_seconds",
                                        "Histogram of time spent in RUNNING phase for request.",
                                        REQUEST_LATENCY_BUCKETS)
        self.prefill_time = histogram("vllm:request_prefill_time_seconds",
                                      "Histogram of time spent in PREFILL phase for request.",
                                      REQUEST_LATENCY_BUCKETS)
        self.decode_time = histogram("vllm:request_decode_time_seconds",
                                     "Histogram of time spent in DECODE phase for request.",
                                     REQUEST_LATENCY_BUCKETS)
        self.req_preemptions = histogram(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.", NUM_PREEMPTIONS_BUCKETS)
        self.req_kv_computed = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            tokens)
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                     tuple(sorted(cache_config_labels(config, num_gpu_blocks, max_model_len))),
                     registry=reg)
        info.labels(**cache_config_labels(config, num_gpu_blocks, max_model_len)).set(1.0)
        self.lora_info: Gauge | None = None
        if config.serves_lora:
            self.lora_info = Gauge("vllm:lora_requests_info", "Running stats on lora requests.",
                                   ("max_lora", "waiting_lora_adapters",
                                    "running_lora_adapters"), registry=reg)
            self._max_lora = str(config.max_loras)
            self.set_lora_state((), ())
        self._last = EngineStats()
        self._parents: dict[str, _Parent] = {}   # a choice of n > 1 -> its prompt's choices

    def observe_engine(self, stats: EngineStats, produced: bool) -> None:
        """Gauges from the engine's state and counter increments since the last step, which
        ``produced`` outputs or not.

        As vLLM, ``iteration_tokens_total`` is observed only for a step with outputs: the
        prompt tokens computed for the prefills it completed (their cache hits aside, their
        earlier chunks included) plus the tokens it generated."""
        lab, last = self._labels, self._last
        self.running.labels(**lab).set(stats.num_running)
        self.waiting.labels(**lab).set(stats.num_waiting)
        self.waiting_by_reason.labels(**lab, reason="capacity").set(
            stats.num_waiting - stats.num_deferred)
        self.waiting_by_reason.labels(**lab, reason="deferred").set(stats.num_deferred)
        self.kv_usage.labels(**lab).set(stats.kv_cache_usage)
        for metric, now, before in (
                (self.prefix_queries, stats.prefix_cache_queries, last.prefix_cache_queries),
                (self.prefix_hits, stats.prefix_cache_hits, last.prefix_cache_hits),
                (self.prompt_cached, stats.prompt_cached_tokens, last.prompt_cached_tokens),
                (self.preemptions, stats.num_preemptions, last.num_preemptions),
                (self.prompt_tokens, stats.prompt_tokens, last.prompt_tokens),
                (self.generation_tokens, stats.generation_tokens, last.generation_tokens)):
            if now > before:
                metric.labels(**lab).inc(now - before)
        hits = stats.prefix_cache_hits - last.prefix_cache_hits
        if hits > 0:                      # at admission, as prefix_cache_hits
            self.cached_by_source.labels(**lab, source="device").inc(hits)
        # counted with prompt_tokens, when each prefill completes (aborted requests too)
        cached = stats.prompt_cached_tokens - last.prompt_cached_tokens
        computed = stats.prompt_tokens - last.prompt_tokens - cached
        if cached > 0:
            self.prompt_by_source.labels(**lab, source="local_cache_hit").inc(cached)
        if computed > 0:
            self.prompt_by_source.labels(**lab, source="local_compute").inc(computed)
        for reason in FINISHED_REASONS:
            delta = stats.request_success.get(reason, 0) - last.request_success.get(reason, 0)
            if delta > 0:
                self.success.labels(**lab, finished_reason=reason).inc(delta)
        generated = stats.generation_tokens - last.generation_tokens
        if produced and computed + generated > 0:
            self.iteration_tokens.labels(**lab).observe(computed + generated)
        self._last = EngineStats(
            num_running=stats.num_running, num_waiting=stats.num_waiting,
            kv_cache_usage=stats.kv_cache_usage, prompt_tokens=stats.prompt_tokens,
            prompt_cached_tokens=stats.prompt_cached_tokens,
            generation_tokens=stats.generation_tokens,
            prefix_cache_queries=stats.prefix_cache_queries,
            prefix_cache_hits=stats.prefix_cache_hits, num_preemptions=stats.num_preemptions,
            request_success=dict(stats.request_success))

    def observe_first_token(self, ttft_s: float) -> None:
        self.ttft.labels(**self._labels).observe(max(0.0, ttft_s))

    def observe_inter_token(self, itl_s: float) -> None:
        self.itl.labels(**self._labels).observe(max(0.0, itl_s))

    def observe_admitted(self, n: int, request_ids: Sequence[str]) -> None:
        """One prompt's ``n`` choices, engine requests ``request_ids``, were admitted (vLLM's
        parent request): ``request_params_n`` once now, ``request_max_num_generation_tokens``
        once they have all finished, with the most tokens one of them generated."""
        self.params_n.labels(**self._labels).observe(n)
        if n > 1:
            parent = _Parent(len(request_ids))
            for request_id in request_ids:
                self._parents[request_id] = parent

    def forget(self, request_id: str) -> None:
        """An aborted request: no stats of its own; its parent's choices wait for it no more."""
        parent = self._parents.pop(request_id, None)
        if parent is not None:
            parent.left -= 1
            if parent.left == 0 and parent.finished:
                self.req_max_gen_tokens.labels(**self._labels).observe(parent.most)

    def observe_finished(self, stats: RequestStats, arrival_time: float, max_tokens: int) -> None:
        """A request that finished (``max_tokens`` 0: an embedding, which samples nothing)."""
        lab = self._labels
        self.e2e.labels(**lab).observe(max(0.0, stats.finished_time - arrival_time))
        self.queue_time.labels(**lab).observe(
            max(0.0, stats.first_scheduled_time - stats.arrival_time))
        self.prefill_time.labels(**lab).observe(
            max(0.0, stats.first_token_time - stats.first_scheduled_time))
        decode = max(0.0, stats.finished_time - stats.first_token_time)
        self.decode_time.labels(**lab).observe(decode)
        self.inference_time.labels(**lab).observe(
            max(0.0, stats.finished_time - stats.first_scheduled_time))
        gen = stats.num_generation_tokens
        self.tpot.labels(**lab).observe(decode / (gen - 1) if gen > 1 else 0.0)
        self.req_prompt_tokens.labels(**lab).observe(stats.num_prompt_tokens)
        self.req_generation_tokens.labels(**lab).observe(gen)
        self.req_preemptions.labels(**lab).observe(stats.num_preemptions)
        self.req_kv_computed.labels(**lab).observe(stats.num_prompt_tokens
                                                   - stats.num_cached_tokens)
        if max_tokens <= 0:
            return
        self.params_max_tokens.labels(**lab).observe(max_tokens)      # each choice's
        parent = self._parents.pop(stats.request_id, None)
        if parent is None:                      # a choice of its own: its parent's maximum
            self.req_max_gen_tokens.labels(**lab).observe(gen)
        else:
            parent.most, parent.finished = max(parent.most, gen), True
            parent.left -= 1
            if parent.left == 0:
                self.req_max_gen_tokens.labels(**lab).observe(parent.most)

    def set_lora_state(self, waiting: Iterable[str], running: Iterable[str]) -> None:
        if self.lora_info is None:
            return
        self.lora_info.labels(max_lora=self._max_lora,
                              waiting_lora_adapters=",".join(sorted(set(waiting))),
                              running_lora_adapters=",".join(sorted(set(running)))
                              ).set_to_current_time()


def cache_config_labels(config: EmulatorConfig, num_gpu_blocks: int,
                        max_model_len: int) -> Mapping[str, str]:
    """The CacheConfig attributes vLLM exposes as labels of ``vllm:cache_config_info``."""
    kv_tokens = num_gpu_blocks * config.block_size
    return {
        "engine": "0",
        "block_size": str(config.block_size),
        "cache_dtype": "auto",
        "enable_prefix_caching": str(config.enable_prefix_caching),
        "gpu_memory_utilization": str(config.gpu_memory_utilization),
        "hash_block_size": str(config.block_size),
        "is_attention_free": "False",
        "kv_cache_max_concurrency": f"{kv_tokens / max(1, max_model_len):.2f}",
        "kv_cache_memory_bytes": "None",
        "kv_cache_size_tokens": str(kv_tokens),
        "kv_sharing_fast_prefill": "False",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(num_gpu_blocks),
        "num_gpu_blocks_override": str(config.num_gpu_blocks),
        "prefix_caching_hash_algo": "sha256",
        "sliding_window": "None",
        "user_specified_block_size": str(config.block_size != 16),
    }
