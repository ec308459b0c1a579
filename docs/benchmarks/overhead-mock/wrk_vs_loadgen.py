"""Who limits the race with the fast mock: the mock, the Python load generator, or the router?

Run from the repository root
(``PYTHONPATH=. python docs/benchmarks/overhead-mock/wrk_vs_loadgen.py OUT``),
pinned as the race pins (two mock workers and the load on CPU 0, the router on CPU 1):

* the mock alone: wrk (CPU 1) against one mock worker (CPU 0), non-streamed and streamed;
* per target, non-streamed, closed loop at 32 connections for 8 s: the race's Python load
  generator, then wrk ``-t1 -c32``, each with the router's CPU per request and how busy
  CPU 0 (load generator and workers) was.

Writes ``OUT/wrk_vs_loadgen.json`` and ``OUT/wrk_vs_loadgen.md``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.backends import MockBackends, chat_body
from bench.launch import Launched, pinned
from bench.loadgen import LoadSpec
from bench.overhead import run_load_process
from bench.proc_stats import cpu_seconds
from bench.targets import Skipped, TargetContext, plan_target

SECONDS = 8
TARGETS = ("direct", "kvroute-rr", "kvroute", "vllm-router", "nginx")


def cpu0_busy() -> tuple[int, int]:
    fields = Path("/proc/stat").read_text().splitlines()[1].split()   # the "cpu0" line
    ticks = [int(v) for v in fields[1:8]]
    return ticks[3] + ticks[4], sum(ticks)                             # idle + iowait, all


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    idle, total = after[0] - before[0], after[1] - before[1]
    return round(100 * (1 - idle / total), 1) if total else 0.0


def wrk(url: str, script: Path, seconds: int, cpus: str) -> dict[str, float]:
    argv = pinned(["wrk", "-t1", "-c32", f"-d{seconds}s", "--timeout", "10s", "-s", str(script),
                   url], cpus)
    text = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    count = re.search(r"(\d+) requests in ([\d.]+)s", text)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    errors = re.search(r"Socket errors: (.*)", text)
    assert count is not None, text
    return {"requests": int(count.group(1)),
            "requests_per_s": round(int(count.group(1)) / float(count.group(2)), 1),
            "non_2xx": int(bad.group(1)) if bad else 0,
            "socket_errors": errors.group(1) if errors else "none"}


def lua(folder: Path, stream: bool) -> Path:
    body = orjson.dumps(orjson.dumps(chat_body(stream=stream)).decode()).decode()
    path = folder / f"post-{'stream' if stream else 'plain'}.lua"
    path.write_text(f'wrk.method = "POST"\nwrk.body = {body}\n'
                    'wrk.headers["Content-Type"] = "application/json"\n')
    return path


def measured(root: int | None, run: Any) -> dict[str, Any]:
    before_cpu = cpu_seconds(root) if root is not None else 0.0
    before_core = cpu0_busy()
    result: dict[str, Any] = run()
    used = cpu_seconds(root) - before_cpu if root is not None else None
    result["cpu0_busy_percent"] = busy_share(before_core, cpu0_busy())
    done = result.get("requests") or result.get("completed") or 0
    result["router_cpu_us_per_request"] = (round(used / done * 1e6, 1)
                                           if used is not None and done else None)
    return result


def one_target(name: str, urls: list[str], folder: Path, plain: Path) -> dict[str, Any]:
    plan = plan_target(name, TargetContext(urls, folder / name))
    if isinstance(plan, Skipped):
        return {"skipped": plan.reason}
    process = (Launched(name, plan.argv, folder / name / "server.log", cpus="1", env=plan.env)
               if plan.argv is not None else None)
    url = f"{plan.base_url}/v1/chat/completions"
    spec = LoadSpec(url=url, body=chat_body(), concurrency=32, duration_s=SECONDS)
    try:
        if process is not None:
            process.start()
            process.wait_http(plan.ready_url, timeout_s=60.0)
        root = process.pid if process is not None else None
        wrk(url, plain, 2, "0")                                                 # warm-up
        loadgen = measured(root, lambda: run_load_process(spec, folder, "0").to_json())
        with_wrk = measured(root, lambda: wrk(url, plain, SECONDS, "0"))
    finally:
        if process is not None:
            process.stop()
    return {"loadgen": loadgen, "wrk": with_wrk}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"seconds": SECONDS, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                               "load_average_before": Path("/proc/loadavg").read_text().split()[:3]}
    with tempfile.TemporaryDirectory() as tmp, MockBackends(2, 16, cpus=(0,)) as backends:
        folder = Path(tmp)
        plain, stream = lua(folder, False), lua(folder, True)
        url = f"{backends.urls[0]}/v1/chat/completions"
        results["mock_alone"] = {"non_stream": wrk(url, plain, SECONDS, "1"),
                                 "stream": wrk(url, stream, SECONDS, "1")}
        results["targets"] = {name: one_target(name, backends.urls, folder, plain)
                              for name in TARGETS}
    results["load_average_after"] = Path("/proc/loadavg").read_text().split()[:3]
    (out / "wrk_vs_loadgen.json").write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    (out / "wrk_vs_loadgen.md").write_text(table(results))
    print(table(results))


def table(results: dict[str, Any]) -> str:
    alone = results["mock_alone"]
    lines = [f"One mock worker alone (wrk on CPU 1): {alone['non_stream']['requests_per_s']:,.0f} "
             f"non-streamed req/s, {alone['stream']['requests_per_s']:,.0f} streamed req/s.", "",
             "| Target | load | req/s | router CPU µs/req | CPU 0 busy % | errors |",
             "|---|---|---|---|---|---|"]
    for name, result in results["targets"].items():
        if "skipped" in result:
            lines.append(f"| {name} | skipped: {result['skipped']} | | | | |")
            continue
        for load in ("loadgen", "wrk"):
            r = result[load]
            cpu = r["router_cpu_us_per_request"]
            errors = r.get("errors", r.get("non_2xx"))
            lines.append(f"| {name} | {load} | {r['requests_per_s']:,.0f} "
                         f"| {'–' if cpu is None else f'{cpu:,.0f}'} "
                         f"| {r['cpu0_busy_percent']} | {errors} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main(Path(sys.argv[1]))
