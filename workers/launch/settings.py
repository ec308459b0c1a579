"""The ``launch:`` block of a real worker in the fleet file, validated into ``LaunchSettings``.

Every key is optional; what is left out comes from the worker's GPU profile
(``GpuProfile.default_max_num_seqs`` / ``default_max_num_batched_tokens``), its model
(``max_model_len``), its ``tensor_parallel`` and its ``url`` / ``kv_events`` endpoints.

```yaml
workers:
  - id: h100-0
    gpu: h100
    models: [meta-llama/Llama-3.1-8B-Instruct]
    url: http://127.0.0.1:8001
    kv_events: tcp://127.0.0.1:5557
    launch:
      model: /models/Llama-3.1-8B-Instruct   # path or hub id (default: the served name)
      python: /opt/vllm/bin/python            # default: this interpreter
      device: cuda                            # cuda | cpu
      devices: [0]                            # CUDA_VISIBLE_DEVICES (cuda only; at least
                                              # tensor_parallel of them)
      gpu_memory_utilization: 0.9
      max_num_seqs: 1024
      max_num_batched_tokens: 8192
      max_model_len: 8192
      enable_prefix_caching: true             # default: on, or vLLM's for a pooling model
      num_gpu_blocks_override: null           # shrink the KV cache (tests, experiments)
      cpu_kvcache_space_gb: 1                 # VLLM_CPU_KVCACHE_SPACE (cpu only)
      dev_mode: false                         # VLLM_SERVER_DEV_MODE=1 (/reset_prefix_cache)
      kv_events_topic: kv-events
      env: {HF_HUB_OFFLINE: "1"}
      extra_args: [--enforce-eager]
```
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

DEVICES = ("cuda", "cpu")
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
DEFAULT_KV_EVENTS_TOPIC = "kv-events"


class LaunchConfigError(ValueError):
    """A ``launch:`` block is invalid; the message names the field."""


@dataclass(frozen=True, slots=True)
class LaunchSettings:
    model: str | None = None
    python: str | None = None
    device: str = "cuda"
    devices: tuple[int, ...] = ()
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    enable_prefix_caching: bool | None = None     # None: on for generation, vLLM's default
                                                  # for a pooling model (off for encoders)
    num_gpu_blocks_override: int | None = None
    cpu_kvcache_space_gb: int = 1
    dev_mode: bool = False
    kv_events_topic: str = DEFAULT_KV_EVENTS_TOPIC
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    extra_args: tuple[str, ...] = ()


_POSITIVE_INTS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len",
                  "num_gpu_blocks_override", "cpu_kvcache_space_gb")
_STRINGS = ("model", "python", "kv_events_topic")
_BOOLS = ("enable_prefix_caching", "dev_mode")


def parse_launch(raw: Mapping[str, Any] | None, where: str) -> LaunchSettings:
    """Validate a raw ``launch:`` mapping; ``where`` prefixes error messages."""
    if raw is None:
        return LaunchSettings()
    known = set(LaunchSettings.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise LaunchConfigError(f"{where}: unknown key(s): {', '.join(map(str, unknown))}")
    values: dict[str, Any] = {}
    for key in _STRINGS:
        if raw.get(key) is not None:
            values[key] = _string(raw[key], f"{where}.{key}")
    for key in _POSITIVE_INTS:
        if raw.get(key) is not None:
            values[key] = _positive_int(raw[key], f"{where}.{key}")
    for key in _BOOLS:
        if key in raw:
            if not isinstance(raw[key], bool):
                raise LaunchConfigError(f"{where}.{key}: must be true or false")
            values[key] = raw[key]
    if "device" in raw:
        if raw["device"] not in DEVICES:
            raise LaunchConfigError(f"{where}.device: must be one of: {', '.join(DEVICES)}")
        values["device"] = raw["device"]
    if "devices" in raw:
        devices = raw["devices"]
        if not isinstance(devices, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices):
            raise LaunchConfigError(f"{where}.devices: must be a list of GPU indexes")
        if len(set(devices)) < len(devices):
            raise LaunchConfigError(f"{where}.devices: lists a GPU twice: {devices}")
        values["devices"] = tuple(devices)
    if "gpu_memory_utilization" in raw:
        util = raw["gpu_memory_utilization"]
        if isinstance(util, bool) or not isinstance(util, int | float) or not 0 < util <= 1:
            raise LaunchConfigError(f"{where}.gpu_memory_utilization: must be in (0, 1]")
        values["gpu_memory_utilization"] = float(util)
    if "env" in raw:
        env = raw["env"]
        if not isinstance(env, Mapping):
            raise LaunchConfigError(f"{where}.env: must be a mapping of strings")
        values["env"] = MappingProxyType({str(k): str(v) for k, v in env.items()})
    if "extra_args" in raw:
        extra = raw["extra_args"]
        if not isinstance(extra, list) or not all(isinstance(a, str | int | float) for a in extra):
            raise LaunchConfigError(f"{where}.extra_args: must be a list of strings")
        values["extra_args"] = tuple(str(a) for a in extra)
    return LaunchSettings(**values)


def check_devices(settings: LaunchSettings, tensor_parallel: int, where: str,
                  worker_id: str) -> None:
    """vLLM runs one tensor-parallel rank per GPU: ``devices``, when given for a cuda worker,
    must list at least ``tensor_parallel`` of them (left out, vLLM takes the first it sees,
    which this machine-independent check cannot count)."""
    n = len(settings.devices)
    if settings.device == "cuda" and 0 < n < tensor_parallel:
        raise LaunchConfigError(
            f"{where}.devices: {list(settings.devices)} is {n} GPU{'s' if n > 1 else ''}, but "
            f"worker {worker_id!r} has tensor_parallel: {tensor_parallel}, which needs "
            f"{tensor_parallel} (one per rank)")


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise LaunchConfigError(f"{where}: must be a non-empty string")
    return value


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise LaunchConfigError(f"{where}: must be a positive integer")
    return value
