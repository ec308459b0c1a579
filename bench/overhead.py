"""The overhead race: the same zero-latency workers, each router in front of them in turn.

Method of shared/reference/overhead-anchors.md, made one command: two workers answering at
once, 16 output tokens (``backend``: ``emulator``, Python ``EmulatorProcess``es at time scale
0, a few hundred requests a second each; or ``mock``, ``bench/mock_backend.py``, tens of
thousands, so that the router is the bottleneck), the router under test pinned to CPU 1
(``taskset -c 1``), the load generator and the workers on CPU 0, load from a separate
process (worker count and CPU lists are options, for hosts with more cores). Per target: a
warm-up, then a closed-loop non-streamed phase and a streamed phase of
``duration_s`` each at ``concurrency``. Router CPU is user + system time of its whole process
tree from ``/proc`` over the phase, divided by the completed requests; RSS is the tree's peak,
sampled every 0.5 s. A target that is not installed or fails to start is reported as skipped
with the reason.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.backends import BackendKind, chat_body, make_backends
from bench.checks import cpu_list
from bench.launch import Launched, LaunchError, checkout_env, pinned, python_module
from bench.loadgen import LoadResult, LoadSpec
from bench.proc_stats import RssSampler, cpu_seconds
from bench.targets import Skipped, TargetContext, TargetPlan, plan_target

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class OverheadConfig:
    targets: tuple[str, ...]
    duration_s: float = 5.0
    concurrency: int = 32
    warmup_s: float = 1.0
    output_tokens: int = 16
    pinned: bool = True
    backends: int = 2
    router_cpus: str = "1"          # taskset list for the router under test
    load_cpus: str = "0"            # the load generator
    backend_cpus: str = "0"         # the workers
    backend: BackendKind = "emulator"

    @staticmethod
    def cpu_set(text: str) -> tuple[int, ...]:
        """``"0,2-4"`` → (0, 2, 3, 4)."""
        return cpu_list(text)


@dataclass(slots=True)
class PhaseResult:
    load: LoadResult
    router_cpu_s: float | None
    router_cpu_us_per_request: float | None
    router_cpu_percent: float | None
    # the same per request after subtracting the router's idle CPU rate (its own background
    # work: metric scrapes, timers) over the phase
    router_cpu_us_per_request_net: float | None = None


@dataclass(slots=True)
class TargetResult:
    name: str
    skipped: str | None = None
    non_stream: PhaseResult | None = None
    stream: PhaseResult | None = None
    rss_peak_mb: float | None = None
    idle_cpu_percent: float | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def run_load_process(spec: LoadSpec, scratch: Path, cpus: str | None) -> LoadResult:
    """Run ``python -m bench.loadgen`` in its own process and parse its result."""
    spec_path = scratch / "loadspec.json"
    spec_path.write_bytes(orjson.dumps(asdict(spec)))
    argv = pinned([*python_module("bench.loadgen"), str(spec_path)], cpus)
    done = subprocess.run(argv, capture_output=True, timeout=spec.duration_s + spec.timeout_s + 30,
                          check=False, env=checkout_env())
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed: {done.stderr.decode(errors='replace')[-400:]}")
    return LoadResult(**orjson.loads(done.stdout.splitlines()[-1]))


def idle_cpu_rate(root_pid: int, seconds: float = 1.0) -> float:
    """CPU seconds per second the process tree spends with no requests."""
    import time
    before = cpu_seconds(root_pid)
    time.sleep(seconds)
    return (cpu_seconds(root_pid) - before) / seconds


def _phase(plan: TargetPlan, root_pid: int | None, stream: bool, config: OverheadConfig,
           scratch: Path, duration_s: float, idle_rate: float = 0.0) -> tuple[PhaseResult, int]:
    spec = LoadSpec(url=f"{plan.base_url}/v1/chat/completions",
                    body=chat_body(max_tokens=config.output_tokens, stream=stream),
                    stream=stream, concurrency=config.concurrency, duration_s=duration_s,
                    headers=dict(plan.headers))
    load_cpus = config.load_cpus if config.pinned else None
    if root_pid is None:
        return PhaseResult(run_load_process(spec, scratch, load_cpus), None, None, None), 0
    with RssSampler(root_pid) as rss:
        before = cpu_seconds(root_pid)
        load = run_load_process(spec, scratch, load_cpus)
        used = cpu_seconds(root_pid) - before
    per_request = used / load.completed * 1e6 if load.completed else None
    net = (max(0.0, used - idle_rate * load.elapsed_s) / load.completed * 1e6
           if load.completed else None)
    percent = used / load.elapsed_s * 100 if load.elapsed_s > 0 else None
    return (PhaseResult(load, round(used, 3), _round(per_request), _round(percent),
                        _round(net)), rss.peak_bytes)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def measure_target(name: str, backends: Sequence[str], config: OverheadConfig, workdir: Path,
                   progress: Progress) -> TargetResult:
    plan = plan_target(name, TargetContext(backends, workdir / name, pinned=config.pinned))
    if isinstance(plan, Skipped):
        progress(f"{name}: skipped ({plan.reason})")
        return TargetResult(name, skipped=plan.reason)
    process = None
    if plan.argv is not None:
        process = Launched(name, plan.argv, workdir / name / "server.log",
                           cpus=config.router_cpus if config.pinned else None, env=plan.env)
    try:
        if process is not None:
            process.start()
            process.wait_http(plan.ready_url, timeout_s=60.0, headers=plan.headers)
        root = process.pid if process is not None else None
        scratch = workdir / name
        progress(f"{name}: warm-up {config.warmup_s:.0f}s")
        _phase(plan, root, False, config, scratch, config.warmup_s)
        _phase(plan, root, True, config, scratch, config.warmup_s)
        idle = idle_cpu_rate(root) if root is not None else 0.0
        progress(f"{name}: non-streamed {config.duration_s:.0f}s at c={config.concurrency}")
        plain, rss_a = _phase(plan, root, False, config, scratch, config.duration_s, idle)
        progress(f"{name}: streamed {config.duration_s:.0f}s at c={config.concurrency}")
        stream, rss_b = _phase(plan, root, True, config, scratch, config.duration_s, idle)
    except (LaunchError, RuntimeError, subprocess.TimeoutExpired) as exc:
        progress(f"{name}: failed ({exc})")
        return TargetResult(name, skipped=f"failed: {str(exc)[:300]}")
    finally:
        if process is not None:
            process.stop()
    rss = max(rss_a, rss_b)
    result = TargetResult(name, non_stream=plain, stream=stream,
                          rss_peak_mb=round(rss / 2**20, 1) if rss else None,
                          idle_cpu_percent=round(idle * 100, 2) if root is not None else None)
    progress(f"{name}: {plain.load.requests_per_s} req/s, "
             f"{_shown(plain.router_cpu_us_per_request)} µs/req; stream "
             f"{stream.load.requests_per_s} req/s, "
             f"{_shown(stream.router_cpu_us_per_request)} µs/req")
    return result


def _shown(value: float | None) -> str:
    """A progress line's number; ``–`` where none was measured (``direct``: no router), as
    the Markdown table shows it."""
    return "–" if value is None else str(value)


def run_overhead(config: OverheadConfig, progress: Progress,
                 measured: Callable[[list[TargetResult]], object] | None = None,
                 ) -> list[TargetResult]:
    """Each target in turn; ``measured`` gets the results so far after each one (the CLI
    writes them, so an interrupted race keeps the targets already measured)."""
    results: list[TargetResult] = []
    cpus = config.cpu_set(config.backend_cpus) if config.pinned else None
    with tempfile.TemporaryDirectory(prefix="kvroute-bench-") as tmp, \
            make_backends(config.backend, config.backends, config.output_tokens,
                          cpus) as backends:
        progress(f"{config.backend} backends up: {', '.join(backends.urls)}")
        for name in config.targets:
            results.append(measure_target(name, backends.urls, config, Path(tmp), progress))
            if measured is not None:
                measured(results)
    return results
