"""Where the router's memory goes: the soak's traffic through a router run in this process
under ``tracemalloc``, then what is alive, by the file that allocated it.

The same requests as ``bench.soak`` (``request_of``: no two alike), 32 at a time, through
the router of ``config/routing.yaml`` on a fleet file's emulated workers (time scale 0, in a
process of their own). Tracing slows the router several times, so this runs fewer requests
than the soak. Prints the Python memory traced every 10,000 requests, then what is alive
at the end by allocating file (router start-up included), then what grew over the second
half of the run by allocation site (``--frames`` deep).

    .venv/bin/python docs/benchmarks/soak/memory_sites.py --requests 40000 \\
        > docs/benchmarks/soak/memory_sites.txt
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import tracemalloc
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT))

import aiohttp  # noqa: E402

from bench.launch import emulated_fleet_on_free_ports, wait_all_workers_healthy  # noqa: E402
from bench.soak import DEFAULT_FLEET, request_of  # noqa: E402
from router.app import start_router  # noqa: E402
from router.settings import Settings  # noqa: E402
from workers.emulator.process import EmulatorFleet  # noqa: E402
from workers.fleet import load_fleet  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
MIB = 2 ** 20


async def trace(fleet_path: Path, total: int) -> None:
    settings = Settings(fleet_path=fleet_path, routing_path=REPO_ROOT / "config" / "routing.yaml",
                        host="127.0.0.1", port=0)
    runner, port = await start_router(settings, load_fleet(fleet_path))
    base = f"http://127.0.0.1:{port}"
    numbers = iter(range(total))
    half: list[tracemalloc.Snapshot] = []
    async with aiohttp.ClientSession() as session:
        await wait_all_workers_healthy(session, base)

        async def client() -> None:
            for n in numbers:
                path, body = request_of(n, MODEL, 0)
                headers = {"x-tenant": f"tenant-{n}", "x-session-id": f"session-{n}"}
                async with session.post(base + path, json=body, headers=headers) as resp:
                    await resp.read()
                if n % 10000 == 0:
                    print(n, "requests sent: traced MiB",
                          round(tracemalloc.get_traced_memory()[0] / MIB, 1), flush=True)
                if n == total // 2:
                    gc.collect()
                    half.append(tracemalloc.take_snapshot())

        await asyncio.gather(*(client() for _ in range(32)))
    await asyncio.sleep(1)
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    print("traced MiB at the end", round(tracemalloc.get_traced_memory()[0] / MIB, 1))
    print("== alive at the end, by the file that allocated it (start-up included)")
    for stat in snapshot.statistics("filename")[:25]:
        print(f"{stat.size / MIB:8.1f} MiB {stat.count:9d} {stat.traceback[0].filename}")
    print("== grown over the second half, by allocation site")
    for stat in snapshot.compare_to(half[0], "traceback")[:12]:
        print(f"{stat.size_diff / MIB:8.1f} MiB {stat.count_diff:9d} objs")
        for line in stat.traceback.format()[-8:]:
            if line.startswith("  File"):
                print("      ", line.strip())
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fleet", type=Path, default=DEFAULT_FLEET)
    parser.add_argument("--requests", type=int, default=40_000)
    parser.add_argument("--frames", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fleet_path, _ = emulated_fleet_on_free_ports(args.fleet, Path(tmp))
        with EmulatorFleet(load_fleet(fleet_path), one_process=True, time_scale=0):
            tracemalloc.start(args.frames)
            asyncio.run(trace(fleet_path, args.requests))


if __name__ == "__main__":
    main()
