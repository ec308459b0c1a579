"""The router's collections and CPU per request under a closed loop, with the loop collector
(``loop``) or without it (``cpython``: ``--gc-interval 0``).

Two zero-latency emulated workers (``bench.backends``, the overhead race's), ``kvroute serve``
with ``config/routing.yaml`` pinned to CPU 1, 32 connections posting the race's 1,069-byte
chat body (``stream`` or ``plain``) for 2 s of warm-up and 8 s measured; prints the requests,
the router's CPU per request (``/proc``) and its collections by generation (count, ms) from
``kvroute_gc_pause_seconds``. With a third argument, a rate, the load is an open loop
instead: plain requests sent at that many a second (evenly spaced) for 8 s after 2 s of
warm-up, and the latency percentiles of those answers printed too. Run from the repository
root, MODE ``loop`` or ``cpython``, KIND ``stream`` or ``plain``::

    .venv/bin/python docs/benchmarks/token-aware/loop-collector/closed_loop_ab.py MODE KIND [RATE]
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO))

from bench.backends import ZeroLatencyBackends, chat_body  # noqa: E402
from bench.targets import url_fleet_text  # noqa: E402
from workers.ports import free_port  # noqa: E402

CONNECTIONS = 32


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid``, in clock ticks of 1/100 s (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().split()
    return (float(fields[13]) + float(fields[14])) / 100.0


async def collections(session: aiohttp.ClientSession, url: str) -> dict[str, tuple[float, float]]:
    """Per generation: collections so far and their seconds, from the router's ``/metrics``."""
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    found = {}
    for generation in "012":
        label = re.escape(f'{{generation="{generation}"}}')
        count = re.search(rf"kvroute_gc_pause_seconds_count{label} (\S+)", text)
        total = re.search(rf"kvroute_gc_pause_seconds_sum{label} (\S+)", text)
        assert count and total, "no kvroute_gc_pause_seconds in /metrics"
        found[generation] = (float(count.group(1)), float(total.group(1)))
    return found


async def drive(url: str, router_pid: int, mode: str, stream: bool) -> None:
    body = chat_body(stream=stream)
    done = 0
    async with aiohttp.ClientSession() as session:
        await wait_healthy(session, url)

        async def client(deadline: float) -> None:
            nonlocal done
            while time.monotonic() < deadline:
                async with session.post(url + "/v1/chat/completions", json=body) as response:
                    await response.read()
                    assert response.status == 200, response.status
                    done += 1

        await asyncio.gather(*(client(time.monotonic() + 2) for _ in range(CONNECTIONS)))
        before, cpu_before, done = await collections(session, url), cpu_seconds(router_pid), 0
        await asyncio.gather(*(client(time.monotonic() + 8) for _ in range(CONNECTIONS)))
        cpu = cpu_seconds(router_pid) - cpu_before
        after = await collections(session, url)
    report(mode, "stream" if stream else "plain", done, cpu, before, after)


def report(mode: str, load: str, done: int, cpu: float, before: dict[str, tuple[float, float]],
           after: dict[str, tuple[float, float]], extra: str = "") -> None:
    by_generation = {g: (after[g][0] - before[g][0], round((after[g][1] - before[g][1]) * 1e3, 1))
                     for g in "012"}
    print(f"{mode:8s} {load:6s} requests {done} cpu_us/req {cpu * 1e6 / done:.0f} "
          f"gc (count, ms) by gen {by_generation}{extra}", flush=True)


async def open_loop(url: str, router_pid: int, mode: str, rate: float) -> None:
    """Plain requests at ``rate`` a second, each timed from its send to its last byte."""
    body = chat_body(stream=False)
    latencies: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await wait_healthy(session, url)

        async def one(timed: bool) -> None:
            started = time.perf_counter()
            async with session.post(url + "/v1/chat/completions", json=body) as response:
                await response.read()
                assert response.status == 200, response.status
            if timed:
                latencies.append(time.perf_counter() - started)

        async def send(seconds: float, timed: bool) -> None:
            start, tasks = time.perf_counter(), []
            for n in range(int(seconds * rate)):
                delay = start + n / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(timed)))
            await asyncio.gather(*tasks)

        await send(2.0, timed=False)
        before, cpu_before = await collections(session, url), cpu_seconds(router_pid)
        await send(8.0, timed=True)
        cpu = cpu_seconds(router_pid) - cpu_before
        after = await collections(session, url)
    ordered = sorted(latencies)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3

    report(mode, f"{rate:g}/s", len(ordered), cpu, before, after,
           f" latency ms p50 {at(0.5):.2f} p99 {at(0.99):.2f} p99.9 {at(0.999):.2f} "
           f"max {ordered[-1] * 1e3:.2f}")


async def wait_healthy(session: aiohttp.ClientSession, url: str) -> None:
    for _ in range(150):
        try:
            async with session.get(url + "/health") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.2)


def main() -> None:
    mode, kind = sys.argv[1], sys.argv[2]
    assert mode in ("loop", "cpython") and kind in ("stream", "plain"), __doc__
    backends = ZeroLatencyBackends().start()
    fleet = Path("/tmp/closed-loop-ab-fleet.yaml")
    fleet.write_text(url_fleet_text(backends.urls))
    port = free_port()
    argv = ["taskset", "-c", "1", sys.executable, "-m", "router.cli", "serve", "--fleet",
            str(fleet), "--routing", str(REPO / "config" / "routing.yaml"), "--port", str(port),
            "--log-level", "WARNING", *(["--gc-interval", "0"] if mode == "cpython" else [])]
    router = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        if len(sys.argv) > 3:
            asyncio.run(open_loop(url, router.pid, mode, float(sys.argv[3])))
        else:
            asyncio.run(drive(url, router.pid, mode, kind == "stream"))
    finally:
        router.send_signal(signal.SIGINT)
        try:
            router.wait(10)
        except subprocess.TimeoutExpired:
            router.kill()
            router.wait()
        backends.stop()


if __name__ == "__main__":
    main()
