"""``workers.upstream``: how connections to a worker are made and how long they are used. A
worker named by a host is reached through a resolver the tests give (``resolve``), against
real aiohttp workers on loopback and a listener that drops connection attempts."""

from __future__ import annotations

import asyncio
import random
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import cast

import pytest
from aiohappyeyeballs import AddrInfoType
from aiohttp import web

from tests.workers.tls_support import make_tls_files
from workers.tls import server_tls_context
from workers.upstream import (
    Resolve,
    UpstreamClient,
    UpstreamConnectError,
    UpstreamConnectTimeout,
    UpstreamLocalError,
)

SCRAPE_TIMEOUT_S = 1.0     # the scraper's whole-GET timeout (workers/scraper.py)


class Worker:
    """An aiohttp server on 127.0.0.1 answering every GET with its name; remembers the
    client ends of the connections its requests came on."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.peers: list[tuple[str, int]] = []
        self.port = 0

    async def _answer(self, request: web.Request) -> web.Response:
        self.peers.append(request.transport.get_extra_info("peername")
                          if request.transport is not None else ("", 0))
        return web.Response(text=self.name)

    @asynccontextmanager
    async def running(self, tls: ssl.SSLContext | None = None) -> AsyncIterator[Worker]:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
        await site.start()
        # (an asyncio.Server, or uvloop's, which derives from none of asyncio's classes)
        server = cast("asyncio.Server", site._server)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            await runner.cleanup()

    def connections(self) -> int:
        return len(set(self.peers))


def address(family: socket.AddressFamily, host: str, port: int) -> AddrInfoType:
    sockaddr = (host, port, 0, 0) if family == socket.AF_INET6 else (host, port)
    return (family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr)


def resolving_to(*addresses: AddrInfoType, calls: list[str] | None = None) -> Resolve:
    """A resolver giving ``addresses`` for any name, noting the names in ``calls``."""
    async def resolve(host: str, port: int) -> Sequence[AddrInfoType]:
        if calls is not None:
            calls.append(host)
        return list(addresses)
    return resolve


@contextmanager
def dropping_listener() -> Iterator[AddrInfoType]:
    """An address on [::1] that lets connection attempts hang: a listener whose accept queue
    (``listen(0)``) is full, so the kernel drops further SYNs, as a broken IPv6 path does."""
    listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        listener.bind(("::1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(3):
            filler = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            fillers.append(filler)
            filler.setblocking(False)
            with suppress(BlockingIOError):      # connecting: it stays in the queue
                filler.connect(("::1", port))
        probe = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        fillers.append(probe)
        probe.settimeout(0.3)
        try:
            probe.connect(("::1", port))
        except TimeoutError:
            pass
        else:
            pytest.skip("a full accept queue does not drop connection attempts here")
        yield address(socket.AF_INET6, "::1", port)
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


async def get_text(client: UpstreamClient, url: str) -> str:
    response = await client.get(url)
    assert response.status == 200
    text = (await response.read()).decode()
    response.close()
    return text


async def test_an_address_that_drops_connection_attempts_does_not_hide_the_next() -> None:
    """A name resolving to [::1] first (dropping SYNs) and 127.0.0.1 second: tried one after
    another inside one 2 s connect timeout, the second address was never reached within the
    scraper's 1 s, and the worker stayed down for good."""
    async with Worker("w").running() as worker:
        with dropping_listener() as dropped:
            client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0,
                                    resolve=resolving_to(dropped, address(
                                        socket.AF_INET, "127.0.0.1", worker.port)))
            try:
                started = time.monotonic()
                async with asyncio.timeout(SCRAPE_TIMEOUT_S):
                    assert await get_text(client, f"http://worker.test:{worker.port}/m") == "w"
                assert time.monotonic() - started < SCRAPE_TIMEOUT_S
                assert await get_text(client, f"http://worker.test:{worker.port}/m") == "w"
                assert worker.connections() == 1        # the raced connection kept alive
            finally:
                await client.close()


async def test_a_name_is_resolved_by_the_system_unless_told_otherwise() -> None:
    async with Worker("w").running() as worker:
        client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0)
        try:
            assert await get_text(client, f"http://localhost:{worker.port}/m") == "w"
        finally:
            await client.close()


async def test_ip_addresses_are_connected_to_without_a_lookup() -> None:
    calls: list[str] = []
    async with Worker("w").running() as worker:
        client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0,
                                resolve=resolving_to(calls=calls))
        try:
            assert await get_text(client, f"http://127.0.0.1:{worker.port}/m") == "w"
        finally:
            await client.close()
    assert calls == []


async def test_a_name_that_does_not_resolve_is_a_connect_error_saying_so() -> None:
    async def unknown(host: str, port: int) -> Sequence[AddrInfoType]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    for resolve in (unknown, resolving_to()):
        client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0, resolve=resolve)
        with pytest.raises(UpstreamConnectError,
                           match=r"^cannot connect to nowhere\.test:8000: nowhere\.test does "
                                 r"not resolve: ") as raised:
            await client.get("http://nowhere.test:8000/metrics")
        assert not isinstance(raised.value, UpstreamLocalError)
        await client.close()


async def test_addresses_that_all_fail_keep_the_errors_meaning() -> None:
    """All dropping: a connect timeout; all refusing: a connect error naming the worker."""
    with dropping_listener() as dropped:
        client = UpstreamClient(connect_timeout_s=0.5, read_timeout_s=2.0,
                                resolve=resolving_to(dropped, dropped))
        with pytest.raises(UpstreamConnectTimeout, match=r"^no connection to worker\.test:80 "):
            await client.get("http://worker.test/metrics")
        await client.close()
    with socket.socket() as unused:          # bound, never listening: refused
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
        client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0, resolve=resolving_to(
            address(socket.AF_INET, "127.0.0.1", port)))
        with pytest.raises(UpstreamConnectError,
                           match=rf"^cannot connect to worker\.test:{port}: ") as raised:
            await client.get(f"http://worker.test:{port}/metrics")
        assert not isinstance(raised.value, UpstreamLocalError)
        await client.close()


async def test_a_worker_named_by_host_is_verified_against_that_name_over_tls(
        tmp_path: Path) -> None:
    files = make_tls_files(tmp_path, hosts=("worker.example.com",))
    tls = server_tls_context(files.certfile, files.keyfile)
    async with Worker("w").running(tls) as worker:
        base = f"https://worker.example.com:{worker.port}"
        client = UpstreamClient(
            connect_timeout_s=2.0, read_timeout_s=2.0,
            tls={base: ssl.create_default_context(cafile=str(files.ca_file))},
            resolve=resolving_to(address(socket.AF_INET, "127.0.0.1", worker.port)))
        try:
            assert await get_text(client, f"{base}/m") == "w"
        finally:
            await client.close()


async def test_a_connection_past_max_age_is_not_used_again() -> None:
    """Kept alive by frequent requests, a connection was used for ever: one made before the
    age limit is closed when released, or when found in the pool, and a new one made."""
    async with Worker("w").running() as worker:
        url = f"http://127.0.0.1:{worker.port}/m"
        # each limit drawn at the top of its range: 0.3 s, not as little as 0.27 s
        client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0, max_age_s=0.3,
                                random_source=Draws(*(0.999999,) * 8))
        try:
            assert await get_text(client, url) == "w"
            assert await get_text(client, url) == "w"
            assert worker.connections() == 1 and client.idle_connections() == 1
            await asyncio.sleep(0.35)            # aged in the pool
            assert await get_text(client, url) == "w"
            assert worker.connections() == 2
            response = await client.get(url)
            await asyncio.sleep(0.35)            # aged while in use
            await response.read()
            response.close()
            assert client.idle_connections() == 0
            assert await get_text(client, url) == "w"
            assert worker.connections() == 3
        finally:
            await client.close()


class Draws(random.Random):
    """A random source whose draws in [0, 1) are the ones given, in turn."""

    def __init__(self, *draws: float) -> None:
        super().__init__(0)
        self._draws = list(draws)

    def random(self) -> float:
        return self._draws.pop(0)


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def both(client: UpstreamClient, url: str) -> None:
    """Two requests at once: each on a connection of its own."""
    assert await asyncio.gather(get_text(client, url), get_text(client, url)) == ["w", "w"]


async def test_connections_opened_together_reach_their_age_limits_apart() -> None:
    """Every connection opened in one burst reached ``max_age_s`` at the same instant, and
    all were made again at once (a storm of handshakes): each draws its own limit within
    the last tenth of ``max_age_s``."""
    async with Worker("w").running() as worker:
        url = f"http://127.0.0.1:{worker.port}/m"
        clock = Clock()
        client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0, keepalive_s=1000,
                                max_age_s=100.0, random_source=Draws(0.0, 0.5, 0.9, 0.9),
                                clock=clock)
        try:
            await both(client, url)             # limits drawn: 90 s and 95 s
            assert worker.connections() == 2 and client.idle_connections() == 2
            clock.now += 89.0
            await both(client, url)
            assert worker.connections() == 2    # both under their limits
            clock.now += 3.0                    # 92 s: the first one's limit passed
            await both(client, url)
            assert worker.connections() == 3    # one made again, the other used on
            clock.now += 4.0                    # 96 s: the second one's too
            await both(client, url)
            assert worker.connections() == 4
        finally:
            await client.close()


async def test_no_connection_is_used_past_max_age() -> None:
    """The age limit drawn at its top is ``max_age_s`` itself, and nothing past it: a worker's
    name moved is still followed within ``max_age_s``."""
    async with Worker("w").running() as worker:
        url = f"http://127.0.0.1:{worker.port}/m"
        clock = Clock()
        # a source drawing past the top of its range is held to it
        client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0, keepalive_s=1000,
                                max_age_s=100.0, random_source=Draws(0.999999, 0.0, 1.5, 0.0),
                                clock=clock)
        try:
            for _ in range(2):
                opened = worker.connections()
                assert await get_text(client, url) == "w"
                assert worker.connections() == opened + 1
                clock.now += 99.99                      # under max_age_s: used again
                assert await get_text(client, url) == "w"
                assert worker.connections() == opened + 1
                clock.now += 0.02                       # past it: made again
                response = await client.get(url)
                await response.read()
                response.close()
                assert worker.connections() == opened + 2
                clock.now += 200.0                      # and let that one age out too
        finally:
            await client.close()


async def test_a_name_moved_to_another_address_is_followed_within_max_age() -> None:
    """A worker's name moved to a new address while the old one still answered: the
    scraper's polls kept the old connection from idling out, so it was polled for ever."""
    async with Worker("old").running() as old, Worker("new").running() as new:
        current = [address(socket.AF_INET, "127.0.0.1", old.port)]

        async def resolve(host: str, port: int) -> Sequence[AddrInfoType]:
            return list(current)

        client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0, max_age_s=0.3,
                                resolve=resolve)
        try:
            assert await get_text(client, "http://worker.test:8000/metrics") == "old"
            current[:] = [address(socket.AF_INET, "127.0.0.1", new.port)]
            seen = []
            for _ in range(20):                  # polled every 50 ms for a second
                seen.append(await get_text(client, "http://worker.test:8000/metrics"))
                await asyncio.sleep(0.05)
            moved = seen.index("new")
            assert 0 < moved <= 8                # within max_age_s (and a poll)
            assert set(seen[moved:]) == {"new"} and old.connections() == 1
        finally:
            await client.close()
