"""kvroute against the tenant-pinned oracle and sglang-router ``cache_aware`` on running engines.

A measurement helper, not a test: on two engines started with ``kvroute launch-vllm`` (the
fleet of ``conftest.fleet_data``: 40-block caches, dev mode), each round sends the workload of
``workload.py`` three ways, caches reset before each: tenant-pinned (the oracle, via
``oracle_run.py``), through an in-process kvroute with ``conftest.prefix_routing``, and through
``sglang-router launch --policy cache_aware`` (started per run with the flags of
``prefix-anchors.md``, stopped by pid). The policy order rotates from round to round. Printed
per run: the engines' hit rate (Σ hits / Σ queries), requests and prompt-token share per
engine, and for kvroute the tenants each engine got.

Usage: ``python tests/real_vllm/peer_compare.py FLEET.yaml SGLANG_ROUTER [ROUNDS]``
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from router.app import start_router  # noqa: E402
from router.settings import Settings  # noqa: E402
from tests.real_vllm.conftest import MODEL, prefix_routing  # noqa: E402
from tests.real_vllm.engine_metrics import reset_prefix_caches, scrape  # noqa: E402
from tests.real_vllm.oracle_run import oracle_hit_rate  # noqa: E402
from tests.real_vllm.workload import (  # noqa: E402
    Conversation,
    model_conversations,
    run_workload,
)
from workers.fleet import load_fleet  # noqa: E402
from workers.ports import free_port  # noqa: E402

HITS, QUERIES = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"
REQUESTS, PROMPT = "vllm:request_success_total", "vllm:prompt_tokens_total"
Runner = Callable[[], Awaitable[str]]


def report(name: str, urls: list[str], before: dict[str, dict[str, float]],
           after: dict[str, dict[str, float]], wall_s: float, extra: str = "") -> str:
    delta = {u: {k: after[u][k] - before[u].get(k, 0.0) for k in (HITS, QUERIES, REQUESTS,
                                                                   PROMPT)} for u in urls}
    hits = sum(d[HITS] for d in delta.values())
    queries = sum(d[QUERIES] for d in delta.values())
    prompt = sum(d[PROMPT] for d in delta.values()) or 1.0
    per_engine = " / ".join(f"{d[HITS] / max(d[QUERIES], 1.0):.3f}" for d in delta.values())
    requests = " / ".join(f"{d[REQUESTS]:.0f}" for d in delta.values())
    share = " / ".join(f"{100 * d[PROMPT] / prompt:.0f}" for d in delta.values())
    return (f"{name}: hit rate {hits / queries:.3f} ({hits:.0f}/{queries:.0f}), per engine "
            f"{per_engine}, requests {requests}, prompt share % {share}, wall {wall_s:.0f} s"
            f"{extra}")


async def measured(name: str, urls: list[str], run: Callable[[], Awaitable[str]]) -> str:
    reset_prefix_caches(urls)
    before = {u: scrape(u) for u in urls}
    started = time.monotonic()
    extra = await run()
    wall = time.monotonic() - started
    after = {u: scrape(u) for u in urls}
    return report(name, urls, before, after, wall, extra)


async def probe(url: str, timeout_s: float = 120.0) -> None:
    """Wait until a 1-token chat request succeeds through ``url``."""
    deadline = time.monotonic() + timeout_s
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.post(url + "/v1/chat/completions", json=body) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} never answered")
            await asyncio.sleep(1.0)


async def kvroute_run(fleet_path: Path, model_dir: Path, urls: list[str],
                      convs: list[Conversation]) -> str:
    with tempfile.TemporaryDirectory() as folder:
        routing = Path(folder) / "routing.yaml"
        routing.write_text(prefix_routing(model_dir))
        settings = Settings(fleet_path=fleet_path, routing_path=routing, port=0,
                            scrape_interval_s=0.1)
        runner, port = await start_router(settings, load_fleet(fleet_path))
        try:
            url = f"http://127.0.0.1:{port}"
            await probe(url)

            async def run() -> str:
                result = await run_workload(url, MODEL, convs)
                per_worker = Counter(worker for _, worker, _ in result.requests)
                tenants = {w: sorted({t for t, wk, _ in result.requests if wk == w})
                           for w in sorted(per_worker)}
                return f", errors {len(result.errors)}, tenants {tenants}"
            return await measured("kvroute", urls, run)
        finally:
            await runner.cleanup()


async def sglang_run(binary: str, urls: list[str], convs: list[Conversation]) -> str:
    port, metrics_port = free_port(), free_port()
    command = [binary, "launch", "--host", "127.0.0.1", "--port", str(port), "--worker-urls",
               *urls, "--policy", "cache_aware", "--log-level", "warn", "--prometheus-host",
               "127.0.0.1", "--prometheus-port", str(metrics_port)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        await probe(url)

        async def run() -> str:
            result = await run_workload(url, MODEL, convs)
            return f", errors {len(result.errors)}"
        return await measured("sglang-router cache_aware", urls, run)
    finally:
        process.terminate()
        process.wait(timeout=30)


async def main(fleet_path: Path, binary: str, rounds: int) -> None:
    fleet = load_fleet(fleet_path)
    urls = [w.info.url for w in fleet.workers]
    model_dir = Path(str((fleet.workers[0].launch or {}).get("model")))
    convs = model_conversations(REPO_ROOT.parent / "shared", model_dir)

    async def oracle() -> str:
        async def run() -> str:
            await oracle_hit_rate(urls, convs)      # resets the caches again, harmless
            return ""
        return await measured("oracle (tenant mod 2)", urls, run)

    runners: list[tuple[str, Runner]] = [
        ("oracle", oracle),
        ("kvroute", lambda: kvroute_run(fleet_path, model_dir, urls, convs)),
        ("sglang", lambda: sglang_run(binary, urls, convs)),
    ]
    for round_ in range(rounds):
        order = runners[round_ % 3:] + runners[:round_ % 3]
        for _, runner in order:
            print(f"round {round_ + 1}: {await runner()}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2],
                     int(sys.argv[3]) if len(sys.argv) > 3 else 2))
