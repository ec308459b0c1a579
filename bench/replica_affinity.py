"""Whether a conversation stays on its worker when its turns reach different router replicas.

A load balancer in front of several ``kvroute serve`` replicas spreads a client's requests
over them, so the turns of one conversation reach different replicas. Each replica routes
by what it knows of the workers' caches; this benchmark measures how often a conversation
moves to another worker between two turns (a move re-prefills its whole history there).

It starts a ``redis-server`` and the emulated workers of ``--fleet`` (on free loopback ports,
``--time-scale``), then for each configuration fresh routers (``python -m router.cli serve``
with ``--routing``), and runs ``--conversations`` conversations of ``--turns`` turns at once:
each turn's prompt is the conversation's own long system prompt, its earlier turns and
answers, and a new question (``max_tokens`` 16). Configurations:

* ``one``: every turn to one replica (the baseline: what one router does);
* ``shared``: two replicas sharing the Redis, turn k to replica k mod 2;
* ``apart``: the same two replicas on two Redis databases, sharing nothing.

A *move* is a turn served by another worker than the conversation's previous turn (at most
``conversations × (turns - 1)``). The workers' own prefix-cache hit rate over the run
(``vllm:prefix_cache_hits_total / queries_total``) says what the moves cost. ``--runs``
repeats each configuration. Writes ``replica_affinity.json`` to ``--out`` and prints a
Markdown table.

    python -m bench.replica_affinity --out out/replica-affinity
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import aiohttp

from bench.checks import first_problem, range_problem, refusal
from bench.launch import (
    REPO_ROOT,
    Launched,
    checkout_env,
    emulated_fleet,
    emulated_fleet_on_free_ports,
    python_module,
)
from bench.redis_server import start_redis
from bench.replay import scrape_counters
from workers.project_files import project_path

CONFIGURATIONS = ("one", "shared", "apart")
HITS, QUERIES = "vllm:prefix_cache_hits", "vllm:prefix_cache_queries"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fleet", type=Path, default=project_path("config/fleet.yaml"),
                        help="fleet file whose emulated workers serve (ports are replaced)")
    parser.add_argument("--routing", type=Path, default=project_path("config/routing.yaml"),
                        help="routing file of the replicas")
    parser.add_argument("--conversations", type=int, default=12,
                        help="conversations run at once (default %(default)s)")
    parser.add_argument("--turns", type=int, default=6,
                        help="turns of each conversation (default %(default)s)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each configuration")
    parser.add_argument("--time-scale", type=float, default=0.1,
                        help="the emulated workers' time scale (default %(default)s)")
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for replica_affinity.json")


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    problem = first_problem(range_problem("--conversations", args.conversations, 1),
                            range_problem("--turns", args.turns, 2),
                            range_problem("--runs", args.runs, 1),
                            range_problem("--time-scale", args.time_scale, 0))
    if problem is None and shutil.which("redis-server") is None:
        return "redis-server is not installed (apt-get install redis-server)"
    if problem is None and not args.routing.is_file():
        problem = f"--routing: no such file: {args.routing}"
    if problem is None:
        try:
            emulated_fleet(args.fleet)       # readable, and every worker emulated
        except ValueError as exc:
            problem = str(exc)
    return problem


class Replicas:
    """Router processes for one configuration, stopped on exit."""

    def __init__(self, fleet: Path, routing: Path, redis_urls: Sequence[str],
                 folder: Path) -> None:
        from workers.ports import free_port

        self.urls: list[str] = []
        self._routers: list[Launched] = []
        for index, redis_url in enumerate(redis_urls):
            port = free_port()
            self.urls.append(f"http://127.0.0.1:{port}")
            self._routers.append(Launched(
                f"replica-{index}",
                [*python_module("router.cli"), "serve", "--fleet", str(fleet.resolve()),
                 "--routing", str(routing.resolve()), "--port", str(port),
                 "--redis-url", redis_url,
                 "--replica-id", f"replica-{index}"],
                folder / f"replica-{index}.log", cwd=REPO_ROOT, env=checkout_env()))

    def __enter__(self) -> Replicas:
        try:
            for router, url in zip(self._routers, self.urls, strict=True):
                router.start()
                router.wait_http(f"{url}/health", timeout_s=60.0)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for router in self._routers:
            router.stop()


async def converse(targets: Sequence[str], model: str, conversations: int, turns: int,
                   seed: int) -> list[list[str]]:
    """The worker of every turn of every conversation (run at once), turn k sent to
    ``targets[k % len(targets)]``."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:

        async def one(number: int) -> list[str]:
            facts = " ".join(f"Rule {i} of desk {number}.{seed} says {i * (number + 7)}."
                             for i in range(240))
            messages: list[dict[str, str]] = [{"role": "system", "content": facts}]
            workers: list[str] = []
            for turn in range(turns):
                messages.append({"role": "user", "content": f"question {turn} of {number}"})
                async with session.post(
                        f"{targets[turn % len(targets)]}/v1/chat/completions",
                        json={"model": model, "messages": messages,
                              "max_tokens": 16}) as resp:
                    body = await resp.json()
                    if resp.status != 200:
                        raise RuntimeError(f"turn {turn} of {number}: {resp.status} {body}")
                    workers.append(resp.headers["x-kvroute-worker"])
                    messages.append({"role": "assistant",
                                     "content": body["choices"][0]["message"]["content"]})
            return workers

        return list(await asyncio.gather(*(one(n) for n in range(conversations))))


def moves(workers_by_conversation: Sequence[Sequence[str]]) -> int:
    """Turns served by another worker than their conversation's previous turn."""
    return sum(a != b for workers in workers_by_conversation
               for a, b in pairwise(workers))


def hit_rate(before: Mapping[str, Mapping[str, float]],
             after: Mapping[str, Mapping[str, float]]) -> float | None:
    hits = sum(after[w][HITS] - before[w][HITS] for w in after)
    queries = sum(after[w][QUERIES] - before[w][QUERIES] for w in after)
    return hits / queries if queries > 0 else None


def run(args: argparse.Namespace) -> int:
    refused = refusal("replica-affinity", args, check)
    if refused is not None:
        return refused
    from workers.emulator.process import EmulatorFleet
    from workers.fleet import load_fleet

    binary = shutil.which("redis-server")
    assert binary is not None                   # (check)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kvroute-replicas-") as tmp:
        folder = Path(tmp)
        fleet_path, _ = emulated_fleet_on_free_ports(args.fleet, folder)
        fleet = load_fleet(fleet_path)
        model = fleet.workers[0].info.models[0]
        worker_urls = {w.info.id: w.info.url for w in fleet.workers}
        with EmulatorFleet(fleet, time_scale=args.time_scale):
            for run_number in range(1, args.runs + 1):
                for name in CONFIGURATIONS:
                    rows.append(_configuration(binary, name, run_number, args, fleet_path,
                                               model, worker_urls, folder))
    report = {"fleet": str(args.fleet), "routing": str(args.routing),
              "conversations": args.conversations, "turns": args.turns,
              "time_scale": args.time_scale, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "replica_affinity.json").write_text(json.dumps(report, indent=1) + "\n")
    print(markdown(report))
    return 0


def _configuration(binary: str, name: str, run_number: int, args: argparse.Namespace,
                   fleet_path: Path, model: str, worker_urls: Mapping[str, str],
                   folder: Path) -> dict[str, Any]:
    """One run of one configuration, with a Redis and routers of its own."""
    proc, port = start_redis(binary)
    try:
        urls = {"one": [f"redis://127.0.0.1:{port}/0"],
                "shared": [f"redis://127.0.0.1:{port}/0"] * 2,
                "apart": [f"redis://127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/1"]}[name]
        with Replicas(fleet_path, args.routing, urls,
                      folder / f"{name}-{run_number}") as replicas:
            before = scrape_counters(worker_urls)
            seen = asyncio.run(converse(replicas.urls, model, args.conversations, args.turns,
                                        seed=100 * run_number + CONFIGURATIONS.index(name)))
            rate = hit_rate(before, scrape_counters(worker_urls))
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    row = {"configuration": name, "run": run_number, "moves": moves(seen),
           "possible": args.conversations * (args.turns - 1), "worker_hit_rate": rate,
           "workers": seen}
    print(f"[replica-affinity] run {run_number} {name}: {row['moves']} moves of "
          f"{row['possible']}, worker hit rate {'–' if rate is None else f'{rate:.3f}'}",
          file=sys.stderr)
    return row


def markdown(report: Mapping[str, Any]) -> str:
    lines = ["| configuration | run | moves between workers | worker prefix hit rate |",
             "|---|--:|--:|--:|"]
    for row in report["rows"]:
        rate = row["worker_hit_rate"]
        lines.append(f"| {row['configuration']} | {row['run']} | {row['moves']} of "
                     f"{row['possible']} | {'–' if rate is None else f'{rate:.3f}'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replica_affinity",
                                     description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
