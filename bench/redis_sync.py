"""How long a replica's Redis sync takes as the keyspace fills with Responses API owners.

Every ``sync_interval_s`` (0.1 s) each router replica publishes its in-flight counts and
budgets' usage and reads the other replicas' (``router.state.redis_store``). It finds them
through the sorted set ``kvroute:replicas``; before, it scanned the keyspace for
``kvroute:inflight:*``, and the keyspace also holds one ``kvroute:response:<id>`` key per
stored Responses API response (kept a week by default), so that scan grew with them.

For each ``--keys`` count this starts a ``redis-server`` on a free loopback port (stopped at
the end), writes that many response-owner keys, starts ``--replicas`` stores with counts to
share, and times, on one of them, ``--syncs`` calls of ``sync_once`` (what runs now) and as
many of the keyspace scan the former sync made before its reads (``SCAN MATCH
kvroute:inflight:* COUNT 100``, as it was called). Writes ``redis_sync.json`` to ``--out``
and prints a Markdown table.

    python -m bench.redis_sync --keys 0,100000,1000000 --out out/redis-sync
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.checks import first_problem, int_list, int_list_problem, range_problem, refusal
from bench.redis_server import start_redis

FORMER_MATCH = "kvroute:inflight:*"
WRITE_BATCH = 10_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keys", default="0,100000,1000000",
                        help="response-owner keys in Redis, comma-separated counts")
    parser.add_argument("--replicas", type=int, default=4, help="router replicas sharing counts")
    parser.add_argument("--syncs", type=int, default=100, help="timed syncs (and scans) each")
    parser.add_argument("--out", type=Path, required=True, help="folder for redis_sync.json")


async def _fill(url: str, count: int) -> None:
    import redis.asyncio as redis

    client: Any = redis.Redis.from_url(url)     # (the stubs lack aclose)
    try:
        for start in range(0, count, WRITE_BATCH):
            async with client.pipeline(transaction=False) as pipe:
                for i in range(start, min(count, start + WRITE_BATCH)):
                    pipe.set(f"kvroute:response:resp_{i:012d}", "w1", ex=3600)
                await pipe.execute()
            print(f"[redis-sync] {min(count, start + WRITE_BATCH):,} / {count:,} keys",
                  file=sys.stderr, end="\r", flush=True)
    finally:
        await client.aclose()
    if count:
        print(file=sys.stderr)


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": 1000 * statistics.median(ordered),
            "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "mean_ms": 1000 * statistics.fmean(ordered)}


async def _measure(url: str, replicas: int, syncs: int) -> dict[str, Any]:
    from router.state.redis_store import RedisStateStore

    stores = [RedisStateStore(url, f"r{i}", sync_interval_s=3600) for i in range(replicas)]
    for index, store in enumerate(stores):
        await store.start()
        for worker in range(10):
            store.on_dispatch(f"w{worker}", 100 * index, 10)
        store.usage.add("acme", time.monotonic(), requests=index + 1, tokens=100)
        await store.sync_once()
    me = stores[0]
    await me.sync_once()
    assert me.usage.totals("acme", time.monotonic())[0] == sum(range(1, replicas + 1))
    sync_s: list[float] = []
    scan_s: list[float] = []
    client = me._client       # the store's own connection, as the former scan used it
    try:
        for _ in range(syncs):
            started = time.perf_counter()
            await me.sync_once()
            sync_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            found = [k async for k in client.scan_iter(match=FORMER_MATCH, count=100)]
            scan_s.append(time.perf_counter() - started)
        assert len(found) == replicas and not me.degraded
        assert len(me.inflight.remote) == 10         # the others' workers, read each sync
    finally:
        for store in stores:
            await store.close()
    return {"sync": _stats(sync_s), "former_scan": _stats(scan_s)}


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    problem = first_problem(int_list_problem("--keys", args.keys, 0),
                            range_problem("--replicas", args.replicas, 1),
                            range_problem("--syncs", args.syncs, 1))
    if problem is None and shutil.which("redis-server") is None:
        return "redis-server is not installed (apt-get install redis-server)"
    return problem


def run(args: argparse.Namespace) -> int:
    refused = refusal("redis-sync", args, check)
    if refused is not None:
        return refused
    binary = shutil.which("redis-server")
    assert binary is not None                   # (check)
    counts = int_list(args.keys)
    rows = []
    for count in counts:
        proc, port = start_redis(binary)
        try:
            url = f"redis://127.0.0.1:{port}/0"
            asyncio.run(_fill(url, count))
            result = asyncio.run(_measure(url, args.replicas, args.syncs))
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        rows.append({"keys": count, **result})
        print(f"[redis-sync] {count:,} keys: sync p50 {result['sync']['p50_ms']:.2f} ms, "
              f"former scan p50 {result['former_scan']['p50_ms']:.2f} ms", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"replicas": args.replicas, "syncs": args.syncs, "rows": rows}
    (args.out / "redis_sync.json").write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report))
    return 0


def markdown(report: dict[str, Any]) -> str:
    lines = ["| response-owner keys | sync p50 / p99 ms (now) | former scan p50 / p99 ms |",
             "|---|---|---|"]
    for row in report["rows"]:
        sync, scan = row["sync"], row["former_scan"]
        lines.append(f"| {row['keys']:,} | {sync['p50_ms']:.2f} / {sync['p99_ms']:.2f} | "
                     f"{scan['p50_ms']:.2f} / {scan['p99_ms']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_sync",
                                     description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
