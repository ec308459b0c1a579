"""The ``emulate:`` block of a fleet file (and the ``kvroute emulate`` flags) as typed config.

Every key of the block, with its default::

```yaml
emulate:
  port: 8101                     # required
  host: 127.0.0.1
  ssl_certfile: null             # serve HTTPS with this certificate (vLLM's --ssl-certfile);
  ssl_keyfile: null              # the worker's url is then https://
  served_model_names: [...]      # default: the worker's models (first = metrics model_name)
  time_scale: 1.0                # 1 real time, 0.1 ten times faster, 0 answer at once
  block_size: 16
  num_gpu_blocks: null           # null: derived from GPU memory as vLLM does
  gpu_memory_utilization: 0.92
  max_num_seqs: null             # null: vLLM's default for the GPU class
  max_num_batched_tokens: null
  max_num_queued_reqs: null      # a request past this many waiting is answered 503 (vLLM's flag)
  max_model_len: null            # null: the model's max_model_len
  enable_prefix_caching: true
  hash_seed: null                # null: vLLM's fixed "vllm-none-hash"
  step_jitter: 0.0               # lognormal sigma applied to each step time
  enable_prompt_tokens_details: false   # usage.prompt_tokens_details.cached_tokens
  server_load_tracking: false    # /load counts in-flight requests (vLLM's flag)
  responses_store: false         # keep /v1/responses answers (VLLM_ENABLE_RESPONSES_API_STORE)
  kv_events: off                 # or a ZMQ endpoint to bind, e.g. tcp://127.0.0.1:5557
  kv_events_replay: null         # ZMQ ROUTER endpoint for replay
  kv_events_topic: ""
  kv_events_encoding: map        # map (v0.33) or array (legacy releases)
  output_len: {dist: lognormal, mean: 256, sigma: 0.8}   # or {dist: fixed, value: N}
                                 # or {dist: uniform, min: A, max: B}; capped by max_tokens
  seed: 0
  lora_adapters: {}              # name -> path (or a list of names)
  runtime_lora_updating: false   # POST /v1/load_lora_adapter, /v1/unload_lora_adapter, as
                                 # vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
  max_loras: 1                   # distinct adapters per batch (vLLM's --max-loras): requests
                                 # for another wait ("deferred") while this many run
  scheduler_reserve_full_isl: true   # admit a waiting request only when its whole prompt
                                 # fits the free KV blocks (vLLM's flag; false: first chunk)
  dev_mode: false                # POST /reset_prefix_cache, as vLLM with VLLM_SERVER_DEV_MODE=1
  faults:
    error_rate: 0.0              # share of generation requests answered with a 500
    refuse_connections: false    # do not listen at all
    refuse_after_s: null         # stop listening this many seconds after start ...
    refuse_for_s: null           # ... for this long (null: for good)
    stall_after_tokens: null     # streams stop sending after N tokens (connection stays open)
    error_after_tokens: null     # chat and completion streams end after N tokens with vLLM's
                                 # in-stream error event (500) and [DONE]
    metrics_delay_s: 0.0         # /metrics answers after this delay
    metrics_broken: false        # false, "error" (500) or "garbage" (200, malformed text)
```

Unknown keys are an error naming the key (``EmulatorConfigError``).

The worker's API key is not an ``emulate:`` key (a fleet file holds no secrets): a worker
with ``api_key_env`` (``workers.fleet``) asks, as vLLM started with ``--api-key`` does, for the
key that variable holds (``kvroute emulate --api-key`` for a worker without a fleet file).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from workers.credentials import worker_api_key
from workers.engine.api import EngineConfig
from workers.engine.capacity import config_limits
from workers.engine.profiles import GpuProfile, ModelSpec
from workers.fleet import FleetConfig

KvEventsEncoding = Literal["map", "array"]
MetricsBroken = Literal["off", "error", "garbage"]


class EmulatorConfigError(ValueError):
    """An ``emulate:`` block (or emulator flag) is invalid; the message names the key."""


@dataclass(frozen=True, slots=True)
class OutputLengthConfig:
    """How many tokens a request generates when it does not set ``ignore_eos``.

    ``fixed``: always ``value``; ``uniform``: integer in [min, max]; ``lognormal``: mean
    ``mean`` tokens with log-space sigma ``sigma``. The draw is capped by the request's
    max_tokens; a draw below the cap ends on EOS (finish_reason ``stop``).
    """

    dist: Literal["fixed", "uniform", "lognormal"] = "lognormal"
    value: int = 128
    min: int = 1
    max: int = 512
    mean: float = 256.0
    sigma: float = 0.8


@dataclass(frozen=True, slots=True)
class FaultConfig:
    error_rate: float = 0.0
    refuse_connections: bool = False
    refuse_after_s: float | None = None
    refuse_for_s: float | None = None
    stall_after_tokens: int | None = None
    error_after_tokens: int | None = None
    metrics_delay_s: float = 0.0
    metrics_broken: MetricsBroken = "off"


@dataclass(frozen=True, slots=True)
class KvEventsConfig:
    endpoint: str
    replay_endpoint: str | None = None
    topic: str = ""
    encoding: KvEventsEncoding = "map"
    buffer_steps: int = 10000


@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    """Everything one emulated worker needs."""

    port: int
    gpu: GpuProfile
    model: ModelSpec
    served_model_names: tuple[str, ...]
    host: str = "127.0.0.1"
    worker_id: str = "emulator"
    tensor_parallel: int = 1
    time_scale: float = 1.0
    block_size: int = 16
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float = 0.92
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_queued_reqs: int | None = None
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    hash_seed: str | None = None
    step_jitter: float = 0.0
    enable_prompt_tokens_details: bool = False
    server_load_tracking: bool = False
    responses_store: bool = False
    kv_events: KvEventsConfig | None = None
    output_len: OutputLengthConfig = field(default_factory=OutputLengthConfig)
    seed: int = 0
    lora_adapters: Mapping[str, str] = field(default_factory=dict)
    runtime_lora_updating: bool = False
    max_loras: int = 1
    scheduler_reserve_full_isl: bool = True
    dev_mode: bool = False
    faults: FaultConfig = field(default_factory=FaultConfig)
    api_key: str | None = field(default=None, repr=False)    # as vLLM's --api-key
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @property
    def scheme(self) -> str:
        return "http" if self.ssl_certfile is None else "https"

    @property
    def model_name(self) -> str:
        """The ``model_name`` label of every metric: the first served name."""
        return self.served_model_names[0]

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            model=self.model, gpu=self.gpu, tensor_parallel=self.tensor_parallel,
            block_size=self.block_size, num_gpu_blocks=self.num_gpu_blocks,
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
            max_model_len=self.max_model_len, enable_prefix_caching=self.enable_prefix_caching,
            hash_seed=self.hash_seed, enable_kv_events=self.kv_events is not None,
            step_jitter=self.step_jitter, seed=self.seed,
            max_loras=self.max_loras if self.serves_lora else 0,
            scheduler_reserve_full_isl=self.scheduler_reserve_full_isl)

    @property
    def serves_lora(self) -> bool:
        """Whether LoRA is on (vLLM's ``--enable-lora``): adapters, or loading them later."""
        return bool(self.lora_adapters) or self.runtime_lora_updating


_TOP_KEYS = frozenset({
    "port", "host", "served_model_names", "served_model_name", "time_scale", "block_size",
    "num_gpu_blocks", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
    "max_num_queued_reqs", "max_model_len", "enable_prefix_caching", "hash_seed", "step_jitter",
    "enable_prompt_tokens_details", "server_load_tracking", "responses_store", "kv_events",
    "kv_events_replay",
    "kv_events_topic", "kv_events_encoding", "output_len", "seed", "lora_adapters", "faults",
    "ssl_certfile", "ssl_keyfile", "runtime_lora_updating", "max_loras",
    "scheduler_reserve_full_isl", "dev_mode",
})
_FAULT_KEYS = frozenset({"error_rate", "refuse_connections", "refuse_after_s", "refuse_for_s",
                         "stall_after_tokens", "error_after_tokens", "metrics_delay_s",
                         "metrics_broken"})
_OUTPUT_KEYS = frozenset({"dist", "value", "min", "max", "mean", "sigma"})


def parse_emulate(raw: Mapping[str, Any], *, gpu: GpuProfile, model: ModelSpec,
                  models: Sequence[str], worker_id: str = "emulator",
                  tensor_parallel: int = 1, where: str = "emulate",
                  api_key: str | None = None) -> EmulatorConfig:
    """Validate one ``emulate:`` mapping for a worker of ``gpu`` serving ``models`` (asking
    clients for ``api_key`` when given)."""
    if not isinstance(raw, Mapping):
        raise EmulatorConfigError(f"{where}: must be a mapping")
    unknown = sorted(str(k) for k in set(raw) - _TOP_KEYS)
    if unknown:
        raise EmulatorConfigError(f"{where}: unknown key(s): {', '.join(unknown)}")
    r = _Reader(raw, where)
    served = raw.get("served_model_names", raw.get("served_model_name"))
    if served is None:
        served_names = tuple(models)
    elif isinstance(served, str):
        served_names = (served,)
    elif isinstance(served, list) and served and all(isinstance(s, str) and s for s in served):
        served_names = tuple(served)
    else:
        raise EmulatorConfigError(f"{where}.served_model_names: must be a list of names")
    if not served_names:
        raise EmulatorConfigError(f"{where}.served_model_names: at least one name is required")
    port = r.integer("port", None, lo=0, hi=65535)
    if port is None:
        raise EmulatorConfigError(f"{where}.port: required, an integer")
    config = EmulatorConfig(
        port=port, gpu=gpu, model=model, served_model_names=served_names,
        host=r.string("host", "127.0.0.1"), worker_id=worker_id,
        tensor_parallel=tensor_parallel,
        time_scale=r.number("time_scale", 1.0, lo=0.0),
        block_size=_required(r.integer("block_size", 16, lo=1), where),
        num_gpu_blocks=r.integer("num_gpu_blocks", None, lo=2),
        gpu_memory_utilization=r.number("gpu_memory_utilization", 0.92, lo=0.01, hi=1.0),
        max_num_seqs=r.integer("max_num_seqs", None, lo=1),
        max_num_batched_tokens=r.integer("max_num_batched_tokens", None, lo=1),
        max_num_queued_reqs=r.integer("max_num_queued_reqs", None, lo=1),
        max_model_len=r.integer("max_model_len", None, lo=2),
        enable_prefix_caching=r.boolean("enable_prefix_caching", True),
        hash_seed=r.optional_string("hash_seed"),
        step_jitter=r.number("step_jitter", 0.0, lo=0.0),
        enable_prompt_tokens_details=r.boolean("enable_prompt_tokens_details", False),
        server_load_tracking=r.boolean("server_load_tracking", False),
        responses_store=r.boolean("responses_store", False),
        kv_events=_parse_kv_events(r, where),
        output_len=_parse_output_len(raw.get("output_len"), f"{where}.output_len"),
        seed=_required(r.integer("seed", 0), where),
        lora_adapters=_parse_lora(raw.get("lora_adapters"), f"{where}.lora_adapters"),
        runtime_lora_updating=r.boolean("runtime_lora_updating", False),
        max_loras=_required(r.integer("max_loras", 1, lo=1), where),
        scheduler_reserve_full_isl=r.boolean("scheduler_reserve_full_isl", True),
        dev_mode=r.boolean("dev_mode", False),
        faults=parse_faults(raw.get("faults") or {}, f"{where}.faults"),
        api_key=api_key or None,
        ssl_certfile=r.optional_string("ssl_certfile") or None,
        ssl_keyfile=_keyfile(r, where),
    )
    if config.num_gpu_blocks is not None:   # a cache the GPU cannot hold is refused here
        try:
            config_limits(config.engine_config())
        except ValueError as exc:
            raise EmulatorConfigError(f"{where}: {exc}") from None
    return config


def _keyfile(r: _Reader, where: str) -> str | None:
    keyfile = r.optional_string("ssl_keyfile") or None
    if keyfile is not None and not r.optional_string("ssl_certfile"):
        raise EmulatorConfigError(f"{where}.ssl_keyfile: needs ssl_certfile")
    return keyfile


def parse_faults(raw: Any, where: str = "faults", base: FaultConfig | None = None) -> FaultConfig:
    """Validate a ``faults:`` mapping; keys not given keep ``base``'s values."""
    if not isinstance(raw, Mapping):
        raise EmulatorConfigError(f"{where}: must be a mapping")
    unknown = sorted(str(k) for k in set(raw) - _FAULT_KEYS)
    if unknown:
        raise EmulatorConfigError(f"{where}: unknown key(s): {', '.join(unknown)}")
    b = base or FaultConfig()
    r = _Reader(raw, where)
    broken = raw.get("metrics_broken", b.metrics_broken)
    if broken is True:
        broken = "error"
    elif broken is False or broken is None:
        broken = "off"
    if broken not in ("off", "error", "garbage"):
        raise EmulatorConfigError(f"{where}.metrics_broken: must be false, error or garbage")
    return FaultConfig(
        error_rate=r.number("error_rate", b.error_rate, lo=0.0, hi=1.0),
        refuse_connections=r.boolean("refuse_connections", b.refuse_connections),
        refuse_after_s=r.optional_number("refuse_after_s", b.refuse_after_s),
        refuse_for_s=r.optional_number("refuse_for_s", b.refuse_for_s),
        stall_after_tokens=r.integer("stall_after_tokens", b.stall_after_tokens, lo=0),
        error_after_tokens=r.integer("error_after_tokens", b.error_after_tokens, lo=0),
        metrics_delay_s=r.number("metrics_delay_s", b.metrics_delay_s, lo=0.0),
        metrics_broken=broken,
    )


def _required(value: int | None, where: str) -> int:
    if value is None:
        raise EmulatorConfigError(f"{where}: missing integer")
    return value


def _parse_kv_events(r: _Reader, where: str) -> KvEventsConfig | None:
    raw = r.raw.get("kv_events")
    if raw is None or raw is False or raw in ("off", ""):
        for key in ("kv_events_replay", "kv_events_topic", "kv_events_encoding"):
            if key in r.raw:
                raise EmulatorConfigError(f"{where}.{key}: needs kv_events: <endpoint>")
        return None
    if not isinstance(raw, str) or "://" not in raw:
        raise EmulatorConfigError(
            f"{where}.kv_events: must be off or a ZMQ endpoint such as tcp://127.0.0.1:5557")
    encoding = r.raw.get("kv_events_encoding", "map")
    if encoding not in ("map", "array"):
        raise EmulatorConfigError(f"{where}.kv_events_encoding: must be map or array")
    return KvEventsConfig(endpoint=raw, replay_endpoint=r.optional_string("kv_events_replay"),
                          topic=r.string("kv_events_topic", ""), encoding=encoding)


def _parse_output_len(raw: Any, where: str) -> OutputLengthConfig:
    if raw is None:
        return OutputLengthConfig()
    if not isinstance(raw, Mapping):
        raise EmulatorConfigError(f"{where}: must be a mapping such as {{dist: fixed, value: 64}}")
    unknown = sorted(str(k) for k in set(raw) - _OUTPUT_KEYS)
    if unknown:
        raise EmulatorConfigError(f"{where}: unknown key(s): {', '.join(unknown)}")
    dist = raw.get("dist", "lognormal")
    if dist not in ("fixed", "uniform", "lognormal"):
        raise EmulatorConfigError(f"{where}.dist: must be fixed, uniform or lognormal")
    r = _Reader(raw, where)
    cfg = OutputLengthConfig(
        dist=dist, value=_required(r.integer("value", 128, lo=1), where),
        min=_required(r.integer("min", 1, lo=1), where),
        max=_required(r.integer("max", 512, lo=1), where),
        mean=r.number("mean", 256.0, lo=1.0), sigma=r.number("sigma", 0.8, lo=0.0))
    if cfg.min > cfg.max:
        raise EmulatorConfigError(f"{where}.min: must not exceed max")
    return cfg


def _parse_lora(raw: Any, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, list):
        if not all(isinstance(n, str) and n for n in raw):
            raise EmulatorConfigError(f"{where}: must list adapter names")
        return {n: f"/adapters/{n}" for n in raw}
    if isinstance(raw, Mapping):
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
            raise EmulatorConfigError(f"{where}: must map adapter names to paths")
        return dict(raw)
    raise EmulatorConfigError(f"{where}: must be a list of names or a name -> path mapping")


def _range(lo: float | None, hi: float | None) -> str:
    """``must be >= 0``, ``must be <= 1``, ``must be within [0.01, 1]``."""
    if hi is None:
        return f"must be >= {lo:g}"
    if lo is None:
        return f"must be <= {hi:g}"
    return f"must be within [{lo:g}, {hi:g}]"


class _Reader:
    """Typed access to one mapping's keys with error messages naming ``where.key``."""

    def __init__(self, raw: Mapping[str, Any], where: str) -> None:
        self.raw = raw
        self.where = where

    def _err(self, key: str, what: str) -> EmulatorConfigError:
        return EmulatorConfigError(f"{self.where}.{key}: {what} (got {self.raw.get(key)!r})")

    def number(self, key: str, default: float, lo: float | None = None,
               hi: float | None = None) -> float:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise self._err(key, "must be a number")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise self._err(key, _range(lo, hi))
        return float(value)

    def optional_number(self, key: str, default: float | None) -> float | None:
        if self.raw.get(key, default) is None:
            return None
        return self.number(key, 0.0 if default is None else default, lo=0.0)

    def integer(self, key: str, default: int | None, lo: int | None = None,
                hi: int | None = None) -> int | None:
        value = self.raw.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._err(key, "must be an integer")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise self._err(key, _range(lo, hi))
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            raise self._err(key, "must be true or false")
        return value

    def string(self, key: str, default: str) -> str:
        value = self.raw.get(key, default)
        if not isinstance(value, str):
            raise self._err(key, "must be a string")
        return value

    def optional_string(self, key: str) -> str | None:
        value = self.raw.get(key)
        if value is not None and not isinstance(value, str):
            raise self._err(key, "must be a string")
        return value


def fleet_worker_configs(fleet: FleetConfig, overrides: Mapping[str, Any] | None = None,
                         only: Sequence[str] = (),
                         environ: Mapping[str, str] | None = None) -> list[EmulatorConfig]:
    """The emulator config of every emulated worker of ``fleet`` (or of the ids in ``only``).

    ``overrides`` (e.g. ``{"time_scale": 0.1}`` from the command line) replace the same keys of
    every worker's ``emulate:`` block. A worker's ``api_key_env`` is read from ``environ``
    (default: the process's); unset, it is an error (``MissingApiKey``).
    """
    env = os.environ if environ is None else environ
    configs: list[EmulatorConfig] = []
    wanted = set(only)
    for i, spec in enumerate(fleet.workers):
        if spec.emulate is None or (wanted and spec.info.id not in wanted):
            continue
        raw = {**dict(spec.emulate), **dict(overrides or {})}
        configs.append(parse_emulate(
            raw, gpu=spec.info.gpu, model=spec.info.model_spec, models=spec.info.models,
            worker_id=spec.info.id, tensor_parallel=spec.info.tensor_parallel,
            where=f"{fleet.source}: workers[{i}].emulate",
            api_key=worker_api_key(spec.info, env)))
    missing = wanted - {c.worker_id for c in configs}
    if missing:
        raise EmulatorConfigError(
            f"{fleet.source}: no emulated worker with id(s) {', '.join(sorted(missing))}")
    return configs
