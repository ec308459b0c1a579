"""Write the overhead race: ``overhead.json``, ``overhead.md`` (a table) and ``overhead.png``.

Both files name the workers the race ran against (``--backend``: ``emulator`` or ``mock``):
the JSON under ``config.backend``, the Markdown in a line above the table.

The table has the columns of shared/reference/overhead-anchors.md (router CPU also "net":
minus the router's idle CPU rate, i.e. without its background metric scraping); the plot
shows router CPU per request (non-streamed and streamed) per target against the bar
(120 µs; 250 µs per 16-chunk stream, one core) and requests per second.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.overhead import OverheadConfig, PhaseResult, TargetResult

BAR_US_NON_STREAM = 120.0
BAR_US_STREAM = 250.0


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def _cpu(phase: PhaseResult) -> str:
    raw = _fmt(phase.router_cpu_us_per_request)
    if phase.router_cpu_us_per_request_net is None:
        return raw
    return f"{raw} ({_fmt(phase.router_cpu_us_per_request_net)} net)"


def markdown_table(results: Sequence[TargetResult]) -> str:
    head = ("| Target | Non-stream req/s | p50 ms | p99 ms | Router CPU % | Router CPU µs/req "
            "| Stream req/s | TTFC p50 / p99 ms | Total p50 / p99 ms | Stream CPU µs/req "
            "| Idle CPU % | RSS MB | Errors |\n|" + "---|" * 13)
    rows = [head]
    for r in results:
        if r.skipped is not None or r.non_stream is None or r.stream is None:
            rows.append(f"| {r.name} | skipped: {r.skipped} |" + " |" * 11)
            continue
        a, s = r.non_stream, r.stream
        rows.append(
            f"| {r.name} | {_fmt(a.load.requests_per_s)} | {_fmt(a.load.latency_p50_ms, 2)} "
            f"| {_fmt(a.load.latency_p99_ms, 2)} | {_fmt(a.router_cpu_percent)} "
            f"| {_cpu(a)} | {_fmt(s.load.requests_per_s)} "
            f"| {_fmt(s.load.ttfc_p50_ms, 2)} / {_fmt(s.load.ttfc_p99_ms, 2)} "
            f"| {_fmt(s.load.latency_p50_ms, 2)} / {_fmt(s.load.latency_p99_ms, 2)} "
            f"| {_cpu(s)} | {_fmt(r.idle_cpu_percent, 1)} "
            f"| {_fmt(r.rss_peak_mb)} "
            f"| {a.load.errors + s.load.errors} |")
    return "\n".join(rows) + "\n"


def write_overhead(out_dir: Path, config: OverheadConfig, results: Sequence[TargetResult],
                   command: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = {
        "command": command, "config": {
            "targets": list(config.targets), "duration_s": config.duration_s,
            "concurrency": config.concurrency, "output_tokens": config.output_tokens,
            "pinned": config.pinned, "backends": config.backends,
            "router_cpus": config.router_cpus, "load_cpus": config.load_cpus,
            "backend_cpus": config.backend_cpus, "backend": config.backend},
        "machine": {"python": platform.python_version(), "cpus": _cpu_count(),
                    "platform": platform.platform()},
        "bar_us": {"non_stream": BAR_US_NON_STREAM, "stream_16_chunks": BAR_US_STREAM},
        "results": [r.to_json() for r in results]}
    json_path = out_dir / "overhead.json"
    json_path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    md_path = out_dir / "overhead.md"
    md_path.write_text(f"Command: `{command}`\n\nBackend: {backend_line(config)}\n\n"
                       f"{markdown_table(results)}")
    return [json_path, md_path, plot_overhead(out_dir / "overhead.png", results)]


BACKEND_WORDS = {
    "emulator": "Python emulated workers (`EmulatorProcess`, time scale 0)",
    "mock": "fast mock workers (`bench/mock_backend.py`, precomputed answers)"}


def backend_line(config: OverheadConfig) -> str:
    """Which workers the race ran against, for the Markdown file."""
    return (f"`{config.backend}`: {config.backends} × {BACKEND_WORDS[config.backend]}, "
            f"{config.output_tokens} output tokens")


def _cpu_count() -> int:
    import os
    return len(os.sched_getaffinity(0))


def plot_overhead(path: Path, results: Sequence[TargetResult]) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in results if r.non_stream is not None and r.stream is not None]
    names = [r.name for r in measured]
    plain = [r.non_stream.router_cpu_us_per_request or 0.0 for r in measured
             if r.non_stream is not None]
    stream = [r.stream.router_cpu_us_per_request or 0.0 for r in measured if r.stream is not None]
    rps = [r.non_stream.load.requests_per_s for r in measured if r.non_stream is not None]
    figure, (cpu_axis, rps_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    positions = range(len(names))
    width = 0.4
    cpu_axis.bar([p - width / 2 for p in positions], plain, width, label="non-streamed")
    cpu_axis.bar([p + width / 2 for p in positions], stream, width, label="streamed (16 chunks)")
    cpu_axis.axhline(BAR_US_NON_STREAM, color="tab:blue", linestyle="--", linewidth=1,
                     label="bar 120 µs")
    cpu_axis.axhline(BAR_US_STREAM, color="tab:orange", linestyle="--", linewidth=1,
                     label="bar 250 µs")
    cpu_axis.set_yscale("log")
    cpu_axis.set_ylabel("router CPU µs per request (log)")
    cpu_axis.set_xticks(list(positions), names, rotation=20)
    cpu_axis.legend(fontsize=8)
    cpu_axis.set_title("Router CPU per request")
    rps_axis.bar(list(positions), rps, color="tab:green")
    rps_axis.set_ylabel("non-streamed requests / s")
    rps_axis.set_xticks(list(positions), names, rotation=20)
    rps_axis.set_title("Throughput, closed loop")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
