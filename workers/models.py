"""Worker data types shared by the scraper, the router, the policies and the simulator.

Three layers, from static to per-decision:

* ``WorkerInfo``: what the fleet file says about a worker (never changes while it runs).
* ``WorkerSnapshot``: what the last scrape of its ``/metrics`` and ``/v1/models`` said.
* ``WorkerView``: what a policy sees for one decision: the snapshot corrected by the
  router's own in-flight accounting. Policies read views only; they never do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from workers.engine.profiles import GpuProfile, ModelSpec

_EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker as declared in the fleet file."""

    id: str
    url: str                        # base URL, e.g. "http://127.0.0.1:8101" (no trailing /v1)
    gpu: GpuProfile
    models: tuple[str, ...]         # served model names, first is the default
    model_spec: ModelSpec           # architecture used for time/cost estimates
    price_per_hour: float           # dollars per hour for the whole worker (all its GPUs)
    tensor_parallel: int = 1
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY_LABELS)
    kv_events_endpoint: str | None = None   # e.g. "tcp://127.0.0.1:5557" when KV events are on
    api_key_env: str | None = None  # environment variable holding the worker's API key
    tls_ca_file: str | None = None  # CA bundle verifying an https:// worker (else the system's)
    # the engine's batch limits (vLLM --max-num-seqs, --max-num-batched-tokens); None: its
    # GPU class's vLLM defaults
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class LoraActivity:
    """The adapters a worker runs and keeps waiting, from vLLM's ``lora_requests_info``:
    at most ``max_loras`` run at once (its ``max_lora`` label; its engines' sum)."""

    running: frozenset[str] = frozenset()
    waiting: frozenset[str] = frozenset()
    max_loras: int | None = None


@dataclass(frozen=True, slots=True)
class WorkerSnapshot:
    """One scrape of a worker, immutable. ``scraped_at`` is ``time.monotonic()``."""

    worker_id: str
    healthy: bool
    scraped_at: float
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0                 # 0..1, vLLM's kv_cache_usage_perc
    block_size: int = 16
    num_gpu_blocks: int = 0
    max_model_len: int = 0
    served_models: tuple[str, ...] = ()
    lora_adapters: tuple[str, ...] = ()   # adapters loaded/running (from /v1/models and lora info)
    # (adapter, its path: the /v1/models card's root), which vLLM hashes into its blocks
    lora_paths: tuple[tuple[str, str], ...] = ()
    lora_activity: LoraActivity | None = None   # running and waiting adapters, when reported
    prefix_cache_queries: float = 0.0     # counters, for dashboards and hit-rate tracking
    prefix_cache_hits: float = 0.0
    num_preemptions: float = 0.0
    generation_tokens: float = 0.0        # tokens the engine generated (a counter)
    generated_at: float | None = None     # when a scrape last saw it rise, requests running
    consecutive_failures: int = 0
    error: str | None = None              # last scrape error, if any


@dataclass(frozen=True, slots=True)
class WorkerView:
    """What a policy sees for one decision: snapshot + router's in-flight correction."""

    info: WorkerInfo
    running: int
    waiting: int
    kv_usage: float
    block_size: int
    num_gpu_blocks: int
    max_model_len: int
    inflight_requests: int      # requests the router has sent and not yet seen finish
    inflight_tokens: int        # their uncached prompt tokens not yet prefilled + tokens to decode
    healthy: bool
    staleness_s: float          # seconds since the snapshot was taken
    served_models: tuple[str, ...] = ()
    lora_adapters: tuple[str, ...] = ()
    inflight_prefill_tokens: int = 0   # the prefill part of inflight_tokens (not yet started)
    lora_paths: tuple[tuple[str, str], ...] = ()   # (adapter, its path), as the snapshot's
    lora_activity: LoraActivity | None = None      # as the snapshot's

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def gpu(self) -> GpuProfile:
        return self.info.gpu

    @property
    def price_per_hour(self) -> float:
        return self.info.price_per_hour

    @property
    def labels(self) -> Mapping[str, str]:
        return self.info.labels

    def serves(self, model: str) -> bool:
        models = self.served_models or self.info.models
        return model in models or model in self.lora_adapters
