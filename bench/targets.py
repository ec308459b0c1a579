"""The routers the live harness can put in front of the emulated workers, and how to run each.

Every target gets the same backends (a list of worker base URLs) and a free port, and answers
with a ``TargetPlan``: the command (None for ``direct``), extra environment, the URL clients
post to, a readiness URL and headers. A target whose software is missing is skipped with the
reason (``make bench-setup`` installs the peers into ``.venv-bench`` and nginx/wrk from
Debian). Routing mirrors shared/reference/overhead-anchors.md: round-robin or the nearest
equivalent, minimal logging, Prometheus (where a peer has one) on loopback.

* ``direct``: the first backend itself, no proxy.
* ``kvroute``: ``kvroute serve`` with the repository's ``config/routing.yaml``.
* ``kvroute-rr``: ``kvroute serve`` with the ``round-robin`` peer preset (least policy work).
* ``kvroute-token-aware``: ``kvroute serve`` with ``config/examples/token-aware.yaml``.
* ``kvroute-gc-cpython``: ``kvroute`` with ``--gc-interval 0``: collections where CPython
  starts them, not from the event loop (an A/B of ``router/collector.py``).
* ``sglang-router``, ``vllm-router``: ``--policy round_robin`` (``cache_aware`` for replay).
* ``litellm``: LiteLLM proxy, ``simple-shuffle`` over both backends, one uvicorn worker.
* ``nginx``: round-robin upstream, keepalive 128, no buffering, 1 worker when pinned.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.launch import checkout_env, python_module
from workers.ports import free_port
from workers.project_files import project_path

REPO = Path(__file__).resolve().parent.parent
BENCH_VENV = REPO / ".venv-bench"
MODEL = "bench-model"
LITELLM_KEY = "sk-kvroute-bench"


@dataclass(frozen=True, slots=True)
class TargetPlan:
    name: str
    argv: tuple[str, ...] | None          # None: nothing to start (direct)
    base_url: str                         # clients post to base_url + /v1/...
    ready_url: str
    env: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Skipped:
    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class TargetContext:
    backends: Sequence[str]               # worker base URLs
    workdir: Path                         # per-target scratch directory
    pinned: bool = True
    policy: str = "round-robin"           # "round-robin" (overhead) or "cache-aware" (replay)
    routing_path: Path | None = None      # kvroute: routing file override
    fleet_text: str | None = None         # kvroute: fleet file (default: URLs of the backends)


PlanBuilder = Callable[[TargetContext], TargetPlan | Skipped]


def _bench_tool(name: str) -> Path | None:
    path = BENCH_VENV / "bin" / name
    if path.exists():
        return path
    found = shutil.which(name)
    return Path(found) if found else None


def url_fleet_text(backends: Sequence[str], gpu: str = "h100") -> str:
    lines = ["models:", f"  {MODEL}: {{arch: llama-3-8b, max_model_len: 131072}}", "workers:"]
    lines += [f"  - {{id: backend-{i}, gpu: {gpu}, models: [{MODEL}], url: '{url}'}}"
              for i, url in enumerate(backends)]
    return "\n".join(lines) + "\n"


def _direct(ctx: TargetContext) -> TargetPlan:
    return TargetPlan("direct", None, ctx.backends[0], f"{ctx.backends[0]}/health")


def _kvroute(name: str, routing: Path, options: tuple[str, ...] = ()) -> PlanBuilder:
    def build(ctx: TargetContext) -> TargetPlan:
        port = free_port()
        fleet = ctx.workdir / "fleet.yaml"
        fleet.write_text(ctx.fleet_text or url_fleet_text(ctx.backends))
        argv = (*python_module("router.cli"), "serve", "--fleet", str(fleet.resolve()),
                "--routing", str((ctx.routing_path or routing).resolve()), "--host", "127.0.0.1",
                "--port", str(port), "--log-level", "WARNING", *options)
        url = f"http://127.0.0.1:{port}"
        return TargetPlan(name, argv, url, f"{url}/health", env=checkout_env())
    return build


def _sglang(ctx: TargetContext) -> TargetPlan | Skipped:
    python = BENCH_VENV / "bin" / "python"
    if not (BENCH_VENV / "bin" / "sglang-router").exists() or not python.exists():
        return Skipped("sglang-router", "not installed (run make bench-setup)")
    port, metrics = free_port(), free_port()
    policy = "cache_aware" if ctx.policy == "cache-aware" else "round_robin"
    argv = (str(python), "-m", "sglang_router.launch_router", "--worker-urls", *ctx.backends,
            "--policy", policy, "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warn", "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(metrics))
    url = f"http://127.0.0.1:{port}"
    return TargetPlan("sglang-router", argv, url, f"{url}/health", {"HF_HUB_OFFLINE": "1"})


def _vllm_router(ctx: TargetContext) -> TargetPlan | Skipped:
    tool = _bench_tool("vllm-router")
    if tool is None:
        return Skipped("vllm-router", "not installed (run make bench-setup)")
    port, metrics = free_port(), free_port()
    policy = "cache_aware" if ctx.policy == "cache-aware" else "round_robin"
    argv = (str(tool), "--worker-urls", *ctx.backends, "--policy", policy,
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics))
    url = f"http://127.0.0.1:{port}"
    return TargetPlan("vllm-router", argv, url, f"{url}/health", {"HF_HUB_OFFLINE": "1"})


def _litellm(ctx: TargetContext) -> TargetPlan | Skipped:
    tool = _bench_tool("litellm")
    if tool is None:
        return Skipped("litellm", "not installed (run make bench-setup)")
    port = free_port()
    deployments = "".join(
        f"  - model_name: {MODEL}\n    litellm_params:\n      model: openai/{MODEL}\n"
        f"      api_base: {url}/v1\n      api_key: none\n" for url in ctx.backends)
    config = ctx.workdir / "litellm.yaml"
    config.write_text(
        f"model_list:\n{deployments}router_settings:\n  routing_strategy: simple-shuffle\n"
        f"general_settings:\n  master_key: {LITELLM_KEY}\n"
        "litellm_settings:\n  turn_off_message_logging: true\n  disable_spend_logs: true\n")
    argv = (str(tool), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
            "--num_workers", "1")
    env = {"LITELLM_LOG": "ERROR", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "DISABLE_SCHEMA_UPDATE": "true"}
    url = f"http://127.0.0.1:{port}"
    return TargetPlan("litellm", argv, url, f"{url}/health/liveliness", env,
                      {"authorization": f"Bearer {LITELLM_KEY}"})


def _nginx(ctx: TargetContext) -> TargetPlan | Skipped:
    tool = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists()
                                     else None)
    if tool is None:
        return Skipped("nginx", "not installed (run make bench-setup)")
    port = free_port()
    servers = "".join(f"    server {url.removeprefix('http://')};\n" for url in ctx.backends)
    workers = 1 if ctx.pinned else 2
    prefix = ctx.workdir / "nginx"
    (prefix / "logs").mkdir(parents=True, exist_ok=True)
    conf = prefix / "nginx.conf"
    conf.write_text(
        f"worker_processes {workers};\npid {prefix}/nginx.pid;\n"
        f"error_log {prefix}/logs/error.log warn;\nevents {{ worker_connections 4096; }}\n"
        "http {\n  access_log off;\n"
        f"  client_body_temp_path {prefix}/body;\n  proxy_temp_path {prefix}/proxy;\n"
        f"  fastcgi_temp_path {prefix}/fastcgi;\n  uwsgi_temp_path {prefix}/uwsgi;\n"
        f"  scgi_temp_path {prefix}/scgi;\n"
        f"  upstream backends {{\n{servers}    keepalive 128;\n  }}\n"
        f"  server {{\n    listen 127.0.0.1:{port};\n    location / {{\n"
        "      proxy_pass http://backends;\n      proxy_http_version 1.1;\n"
        "      proxy_set_header Connection \"\";\n      proxy_buffering off;\n"
        "      proxy_request_buffering off;\n    }\n  }\n}\n")
    argv = (tool, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;")
    url = f"http://127.0.0.1:{port}"
    return TargetPlan("nginx", argv, url, f"{url}/health")


TARGETS: Mapping[str, PlanBuilder] = {
    "direct": _direct,
    "kvroute": _kvroute("kvroute", project_path("config/routing.yaml")),
    "kvroute-rr": _kvroute("kvroute-rr", project_path("config/policies/round-robin.yaml")),
    "kvroute-token-aware": _kvroute("kvroute-token-aware",
                                    project_path("config/examples/token-aware.yaml")),
    "kvroute-gc-cpython": _kvroute("kvroute-gc-cpython", project_path("config/routing.yaml"),
                                   ("--gc-interval", "0")),
    "sglang-router": _sglang,
    "vllm-router": _vllm_router,
    "litellm": _litellm,
    "nginx": _nginx,
}


def plan_target(name: str, ctx: TargetContext) -> TargetPlan | Skipped:
    builder = TARGETS.get(name)
    if builder is None:
        raise ValueError(f"unknown target {name!r} (known: {', '.join(TARGETS)})")
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    return builder(ctx)
