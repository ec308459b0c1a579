"""Redis memory per recorded Responses API owner: ``--keys`` responses remembered through
``RedisStateStore.remember_response`` (the router's own path) on a fresh ``redis-server``
(no persistence, a free loopback port, stopped at the end); prints Redis's ``used_memory``
growth per key.

    .venv/bin/python docs/benchmarks/soak/redis_response_keys.py --keys 100000
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT))

import redis.asyncio as aioredis  # noqa: E402

from router.state.redis_store import RedisStateStore  # noqa: E402
from workers.ports import free_port  # noqa: E402


async def measure(url: str, keys: int) -> None:
    client = aioredis.from_url(url)
    store = RedisStateStore(url, "measure", sync_interval_s=60)
    await store.start()
    try:
        before = (await client.info("memory"))["used_memory"]
        for _ in range(keys):
            await store.remember_response(f"resp_{secrets.token_hex(16)}", "h100-0")
        after = (await client.info("memory"))["used_memory"]
        version = (await client.info("server"))["redis_version"]
    finally:
        await store.close()
        await client.aclose()
    print(f"redis {version}: {keys} response owners, {(after - before) / keys:.0f} bytes each")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=100_000)
    args = parser.parse_args()
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not installed")
    port = free_port()
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        asyncio.run(measure(f"redis://127.0.0.1:{port}/0", args.keys))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
