"""CPU to relay one stream event of 32 MiB that a worker sends in 64 KiB chunks (with LF or
CRLF line ends): ``router.proxy._StreamRelay.feed`` over the chunks, the client's writes left
out. Run from a checkout: ``python docs/benchmarks/stream-events/feed.py``."""

from __future__ import annotations

import asyncio
import time

from router.proxy import COMPLETION_STREAM, _StreamRelay
from router.proxy_usage import UsageRewrite


class _Relay(_StreamRelay):
    __slots__ = ()

    async def _write(self, data: bytes) -> bool:     # the client's side left out
        return True


async def _one(line_end: bytes) -> float:
    relay = _Relay(None, {}, UsageRewrite(True, None), COMPLETION_STREAM)  # type: ignore[arg-type]
    chunk = b"x" * (65536 - len(line_end) + 1) + line_end[:-1]
    started = time.perf_counter()
    for _ in range(512):
        await relay.feed(chunk)
    await relay.feed(line_end[-1:] + line_end)
    return time.perf_counter() - started


def main() -> None:
    for name, line_end in (("LF", b"\n"), ("CRLF", b"\r\n")):
        print(f"{name}: {asyncio.run(_one(line_end)):.3f} s for a 32 MiB event in 64 KiB chunks")


if __name__ == "__main__":
    main()
