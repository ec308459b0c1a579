"""A live observability stack for the dashboard and alert tests.

Starts, all on 127.0.0.1 with free ports: an emulated fleet (H100, A100, L40S serving the
Llama model at 10x speed, each answering 25 % of generations with a 500 so the router
retries), one real-time L40S worker serving a second model with only 16 KV blocks (the
overload target), ``kvroute serve`` (subprocess, decision log on) and Debian's
``prometheus`` scraping the router and every worker every second, with kvroute's recording
rules and alerts (``for:`` durations shortened to 0s in a temporary copy).

``run_scenario`` then drives bounded traffic (chat and completions, streaming and not,
three tenants with shared system prompts, an unknown model, a bad body), overloads the
small worker, and finally stops it so its model has no healthy worker left.
Every process is stopped by its pid.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from router.dashboard.prometheus_api import PrometheusClient
from workers.emulator.process import EmulatorFleet, EmulatorProcess
from workers.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = (REPO_ROOT / "config/prometheus/recording.yml",
              REPO_ROOT / "config/prometheus/alerts.yml")
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TINY_MODEL = "kvroute-test/tiny-kv"
TINY_WORKER = "tiny-0"
TENANTS = ("tenant-a", "tenant-b", "batch")
SYSTEM_PROMPTS = tuple(
    f"You are assistant number {i} of the support team. " + " ".join(
        f"Rule {j}: answer politely, cite the manual section {i}.{j}, keep it short."
        for j in range(12)) for i in range(3))

ROUTING = {
    "slo": {"ttft_s": 0.5, "tpot_s": 0.05},
    "profiles": {
        "default": {
            "filters": [{"type": "model"}, {"type": "healthy"}, {"type": "context-length"}],
            "scorers": [{"type": "prefix", "weight": 1.0}, {"type": "inflight", "weight": 1.0},
                        {"type": "cost", "weight": 0.5}],
            "picker": {"type": "max-score"}},
        "economy": {
            "filters": [{"type": "model"}, {"type": "healthy"}, {"type": "context-length"}],
            "scorers": [{"type": "cost", "weight": 1.0}, {"type": "queue-depth", "weight": 0.5}],
            "picker": {"type": "max-score"}},
    },
    "rules": [{"name": "batch-tenant", "when": {"tenant": "batch"},
               "then": {"profile": "economy"}}],
    "default_profile": "default",
    # the batch tenant sends 17 requests: the last 5 are refused (429), for the panel
    "admission": {"tenants": {"batch": {"requests_per_minute": 12}}},
}


@dataclass
class Stack:
    tmp: Path
    prometheus: PrometheusClient
    router_url: str
    decision_log: Path
    started_at: float = 0.0
    traffic_done_at: float = 0.0
    statuses: list[int] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)


def _http(url: str, body: dict[str, Any] | bytes | None = None,
          headers: dict[str, str] | None = None, timeout: float = 60.0) -> tuple[int, bytes,
                                                                               dict[str, str]]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json",
                                                          **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read(), dict(exc.headers)


def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def _fleet_file(tmp: Path, ports: list[int], tiny_url: str) -> Path:
    main = [("h100-0", "h100", "premium"), ("a100-0", "a100", "standard"),
            ("l40s-0", "l40s", "economy")]
    workers: list[dict[str, Any]] = [
        {"id": wid, "gpu": gpu, "models": [MODEL], "labels": {"pool": pool},
         "emulate": {"port": port, "enable_prompt_tokens_details": True,
                     "faults": {"error_rate": 0.25}}}
        for (wid, gpu, pool), port in zip(main, ports, strict=True)]
    workers.append({"id": TINY_WORKER, "gpu": "l40s", "models": [TINY_MODEL],
                    "labels": {"pool": "overload"}, "url": tiny_url})
    fleet = {"models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192},
                        TINY_MODEL: {"arch": "llama-3-8b", "max_model_len": 256}},
             "workers": workers}
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    return path


def shortened_rules(tmp: Path) -> list[Path]:
    """Copies of the rule files with every ``for:`` set to 0s (alerts fire on first eval)."""
    out = []
    for src in RULE_FILES:
        dst = tmp / src.name
        dst.write_text(re.sub(r"(?m)^(\s*)for: \S+$", r"\1for: 0s", src.read_text()))
        out.append(dst)
    return out


def _prometheus_config(tmp: Path, router_port: int, workers: dict[str, tuple[str, int]]) -> Path:
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                   "scrape_timeout": "900ms"},
        "rule_files": [str(p) for p in shortened_rules(tmp)],
        "scrape_configs": [
            {"job_name": "kvroute-router",
             "static_configs": [{"targets": [f"127.0.0.1:{router_port}"]}]},
            {"job_name": "vllm-workers", "static_configs": [
                {"targets": [f"127.0.0.1:{port}"], "labels": {"worker": wid, "gpu": gpu}}
                for wid, (gpu, port) in workers.items()]},
        ],
    }
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


class _Pid:
    """A subprocess stopped by its pid (SIGTERM, then SIGKILL)."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=out,
                                         stderr=subprocess.STDOUT, env=env)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


class LiveStack:
    """Context manager owning every process of the stack."""

    def __init__(self) -> None:
        prometheus = shutil.which("prometheus")
        if prometheus is None:
            raise RuntimeError("prometheus is not installed (make test-observability "
                               "installs Debian's package)")
        self._prometheus_bin = prometheus
        self._tmpdir = tempfile.TemporaryDirectory(prefix="kvroute-obs-")
        self.tmp = Path(self._tmpdir.name)
        self._stoppers: list[Any] = []

    def __enter__(self) -> Stack:
        try:
            return self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: object) -> None:
        for stop in reversed(self._stoppers):
            stop()
        self._stoppers.clear()
        self._tmpdir.cleanup()

    def stop_tiny_worker(self) -> None:
        self.tiny.stop()

    def _start(self) -> Stack:
        tmp = self.tmp
        self.tiny = EmulatorProcess(
            gpu="l40s", model="llama-3-8b", served_model_names=[TINY_MODEL], time_scale=1.0,
            emulate={"num_gpu_blocks": 16, "max_model_len": 256})
        self.tiny.start()
        self._stoppers.append(self.tiny.stop)
        ports = [free_port() for _ in range(3)]
        fleet_path = _fleet_file(tmp, ports, self.tiny.url)
        fleet = EmulatorFleet(fleet_path, time_scale=0.1)
        fleet.start()
        self._stoppers.append(fleet.stop)
        (tmp / "routing.yaml").write_text(yaml.safe_dump(ROUTING))
        router_port = free_port()
        decision_log = tmp / "decisions.jsonl"
        env = {**os.environ, "KVROUTE_DECISION_LOG": str(decision_log),
               "KVROUTE_DECISION_LOG_SAMPLE": "1"}
        router = _Pid([sys.executable, "-m", "router.cli", "serve", "--fleet", str(fleet_path),
                       "--routing", str(tmp / "routing.yaml"), "--port", str(router_port)],
                      tmp / "router.log", env)
        self._stoppers.append(router.stop)
        router_url = f"http://127.0.0.1:{router_port}"
        _wait(lambda: _http(f"{router_url}/health")[0] == 200, 30, "the router")
        # labelled with the router's GPU class names, as config/prometheus/prometheus.yml
        workers = {"h100-0": ("H100-80GB", ports[0]), "a100-0": ("A100-80GB", ports[1]),
                   "l40s-0": ("L40S-48GB", ports[2]), TINY_WORKER: ("L40S-48GB", self.tiny.port)}
        prom_port = free_port()
        prom = _Pid([self._prometheus_bin,
                     f"--config.file={_prometheus_config(tmp, router_port, workers)}",
                     f"--storage.tsdb.path={tmp / 'tsdb'}",
                     f"--web.listen-address=127.0.0.1:{prom_port}"], tmp / "prometheus.log")
        self._stoppers.append(prom.stop)
        client = PrometheusClient(f"http://127.0.0.1:{prom_port}")
        _wait(lambda: _http(f"{client.base_url}/-/ready")[0] == 200, 30, "prometheus")
        _wait(lambda: len(client.query('up == 1')) == 5, 30, "5 healthy scrape targets")
        return Stack(tmp=tmp, prometheus=client, router_url=router_url,
                     decision_log=decision_log, started_at=time.time())


def _chat(i: int) -> tuple[dict[str, Any], dict[str, str]]:
    tenant = TENANTS[i % len(TENANTS)]
    stream = i % 2 == 0
    body: dict[str, Any] = {
        "model": MODEL, "max_tokens": 8 + (i % 4) * 8, "stream": stream,
        "messages": [{"role": "system", "content": SYSTEM_PROMPTS[i % 3]},
                     {"role": "user", "content": f"Question {i}: how do I reset item {i}?"}]}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body, {"x-tenant": tenant}


def _send(stack: Stack, path: str, body: dict[str, Any] | bytes,
          headers: dict[str, str] | None = None) -> int:
    status, _, resp_headers = _http(f"{stack.router_url}{path}", body, headers)
    stack.statuses.append(status)
    rid = resp_headers.get("x-request-id") or resp_headers.get("X-Request-Id")
    worker = resp_headers.get("x-kvroute-worker") or resp_headers.get("X-Kvroute-Worker")
    if rid and worker not in (None, "none"):      # decided (refusals name their id too)
        stack.request_ids.append(rid)
    return status


def _overload(stack: Stack, pool: ThreadPoolExecutor) -> None:
    """Four concurrent long generations on the 16-block (256-token) worker: each grows to 15
    blocks, so together they fill the cache and preempt each other."""
    prompt = " ".join(f"word{j}" for j in range(20))      # 40 prompt tokens
    body = {"model": TINY_MODEL, "prompt": prompt, "max_tokens": 200}
    for future in [pool.submit(_send, stack, "/v1/completions", body) for _ in range(4)]:
        future.result()


def run_scenario(stack: Stack, live: LiveStack) -> None:
    """Bounded traffic (4 waves of 12 requests, 1.5 s apart), the overload, then the kill."""
    with ThreadPoolExecutor(6) as pool:
        overload = pool.submit(_overload, stack, pool)
        for wave in range(4):
            jobs = [pool.submit(_send, stack, "/v1/chat/completions", *_chat(wave * 12 + k))
                    for k in range(12)]
            jobs.append(pool.submit(_send, stack, "/v1/completions",
                                    {"model": MODEL, "prompt": SYSTEM_PROMPTS[wave % 3],
                                     "max_tokens": 16}, {"x-tenant": TENANTS[wave % 3]}))
            for job in jobs:
                job.result()
            time.sleep(1.5)
        _send(stack, "/v1/chat/completions", {"model": "no-such-model", "messages": [
            {"role": "user", "content": "hi"}]})
        _send(stack, "/v1/chat/completions", b"{not json")
        overload.result()
    time.sleep(3.0)          # two more scrapes and rule evaluations of the final counters
    stack.traffic_done_at = time.time()
    live.stop_tiny_worker()
    client = stack.prometheus
    _wait(lambda: any(r["value"][1] == "0" for r in client.query(
        f'kvroute_worker_up{{worker="{TINY_WORKER}"}}')), 20, "the router to mark tiny-0 down")
