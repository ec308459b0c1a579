"""``workers.upstream``: the proxy's HTTP/1.1 client against raw loopback servers that send
exactly the bytes each test needs (framing split at awkward places, connections dropped,
kept alive or closed)."""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from cryptography import x509
from yarl import URL

from tests.workers.tls_support import make_tls_files
from workers.credentials import worker_authorizations
from workers.fleet import parse_fleet
from workers.models import WorkerInfo
from workers.tls import server_tls_context, worker_tls_contexts
from workers.upstream import (
    MAX_CHUNK_LINE,
    MAX_HEAD,
    UpstreamClient,
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamHeadTooLarge,
    UpstreamLocalError,
    UpstreamPayloadError,
    encode_request,
    origin_of,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class RawServer:
    """A loopback server running ``handler(reader, writer, connection_number)`` per
    connection; remembers the requests' heads and how many connections were made."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.connections = 0
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []
        self.closed_by_client = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        port = self._server.sockets[0].getsockname()[1]
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def read_request(self, reader: asyncio.StreamReader) -> bool:
        """One request head and body; False at the end of the connection."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_by_client.set()
            return False
        self.heads.append(head)
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        self.bodies.append(await reader.readexactly(length))
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self.handler(reader, writer, self.connections)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._handlers.discard(task)


@pytest.fixture
async def client() -> AsyncIterator[UpstreamClient]:
    upstream = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0)
    yield upstream
    await upstream.close()


async def serve(handler: Handler) -> tuple[RawServer, str]:
    server = RawServer(handler)
    return server, await server.start()


def answer(body: bytes, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n"
            b"Content-Length: %d\r\n%s\r\n" % (len(body), extra) + body)


def chunked(*parts: bytes) -> bytes:
    out = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n")
    for part in parts:
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


async def test_keep_alive_answers_reuse_one_connection(client: UpstreamClient) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            writer.write(answer(b'{"n": %d}' % len(server.bodies)))

    server, base = await serve(handler)
    for n in (1, 2, 3):
        response = await client.post(f"{base}/v1/chat/completions?x=1", b'{"a": 1}',
                                     {"Content-Type": "application/json", "X-Request-Id": "r"})
        assert (response.status, response.content_type) == (200, "application/json")
        assert await response.read() == b'{"n": %d}' % n
        response.close()
    assert server.connections == 1 and client.idle_connections() == 1
    head = server.heads[0].decode()
    assert head.startswith("POST /v1/chat/completions?x=1 HTTP/1.1\r\n")
    assert f"Host: {base.removeprefix('http://')}\r\n" in head
    assert "Content-Length: 8\r\n" in head and "X-Request-Id: r\r\n" in head
    assert server.bodies == [b'{"a": 1}'] * 3
    await server.stop()


async def test_the_routers_own_open_file_limit_is_not_the_workers_fault(
        client: UpstreamClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """EMFILE from connect was an UpstreamConnectError like a refused connection: the
    router, out of file descriptors, retried on every worker and ejected them all."""
    loop = asyncio.get_running_loop()

    async def no_descriptors(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(loop, "create_connection", no_descriptors)
    with pytest.raises(UpstreamLocalError, match="Too many open files"):
        await client.post("http://127.0.0.1:9/", b"", {})

    async def refused(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ECONNREFUSED, "Connection refused")

    monkeypatch.setattr(loop, "create_connection", refused)
    with pytest.raises(UpstreamConnectError) as raised:
        await client.post("http://127.0.0.1:9/", b"", {})
    assert not isinstance(raised.value, UpstreamLocalError)


async def test_idle_connections_past_keepalive_are_closed_though_unused() -> None:
    """Idle connections were expired only when taken, last in first out: those under newer
    ones, and all of an origin no request went to any more, stayed open for good (661 file
    descriptors to workers after a burst, with none in flight)."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            writer.write(answer(b"{}"))

    server, base = await serve(handler)
    client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0, keepalive_s=0.2)
    try:
        held = [await client.post(base + "/a", b"", {}) for _ in range(3)]   # three at once
        for response in held:
            await response.read()
            response.close()
        assert client.idle_connections() == 3
        await asyncio.sleep(0.5)                  # past keep-alive, no request at all since
        assert client.idle_connections() == 0     # closed by the client's own timer
        await asyncio.wait_for(server.closed_by_client.wait(), 5.0)
        held = [await client.post(base + "/a", b"", {}) for _ in range(2)]
        for response in held:
            await response.read()
            response.close()
        await asyncio.sleep(0.3)
        other, other_base = await serve(handler)
        (await client.post(other_base + "/b", b"", {})).close()    # another origin's answer
        assert client.idle_connections() == 1     # the expired ones closed on its release
        await other.stop()
    finally:
        await client.close()
        await server.stop()


def test_a_process_out_of_file_descriptors_is_told_apart() -> None:
    """Under uvloop a connect at the open-file limit may fail as an unknown host (its name
    lookup needs a descriptor): the limit itself is then looked at."""
    import subprocess
    import sys

    script = (
        "import os, resource\n"
        "from workers.upstream import out_of_descriptors\n"
        "print(out_of_descriptors())\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\n"
        "held = []\n"
        "try:\n"
        "    while True: held.append(os.open(os.devnull, os.O_RDONLY))\n"
        "except OSError: pass\n"
        "print(out_of_descriptors())\n"
        "os.close(held.pop())\n"
        "print(out_of_descriptors())\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.split() == ["False", "True", "False"], done.stderr


async def test_only_the_retained_origins_keep_idle_connections(client: UpstreamClient) -> None:
    """A worker removed from the fleet whose server stayed up kept the router's idle
    connections for good: the fleet's origins are retained, the others' connections closed,
    now when idle and when their answer ends when in use."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            writer.write(answer(b"{}"))

    async def other_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            n: int) -> None:
        while await other.read_request(reader):
            writer.write(answer(b"{}"))

    server, base = await serve(handler)
    other, other_base = await serve(other_handler)
    kept, gone = origin_of(base), origin_of(other_base)
    (await client.post(base + "/", b"", {})).close()
    in_use = await client.post(other_base + "/", b"", {})     # in use while retained
    (await client.post(other_base + "/", b"", {})).close()    # a second one, left idle
    assert client.idle_connections() == 2
    client.retain_origins([kept])
    assert client.idle_connections() == 1                     # the other's idle one closed
    await asyncio.wait_for(other.closed_by_client.wait(), 5.0)
    await in_use.read()
    in_use.close()                                            # not pooled again
    assert client.idle_connections() == 1
    (await client.post(base + "/", b"", {})).close()
    assert server.connections == 1 and gone != kept
    await server.stop()
    await other.stop()


@pytest.mark.parametrize("split", [1, 3, 7, 1000])
async def test_chunked_bodies_are_decoded_however_they_are_cut(
        client: UpstreamClient, split: int) -> None:
    events = [b"data: %d\n\n" % i for i in range(5)]
    wire = chunked(*events)
    # a chunk extension and a trailer on the last chunk
    wire = wire.replace(b"\r\n0\r\n\r\n", b"\r\n0;ext=1\r\nTrailer: x\r\n\r\n")

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            for start in range(0, len(wire), split):
                writer.write(wire[start:start + split])
                await writer.drain()
                await asyncio.sleep(0)

    server, base = await serve(handler)
    for _ in range(2):
        response = await client.post(f"{base}/s", b"{}", {})
        assert response.content_type == "text/event-stream"
        got = [chunk async for chunk in response.chunks()]
        assert b"".join(got) == b"".join(events) and all(got)
        response.close()
    assert server.connections == 1          # reused after a complete chunked body
    await server.stop()


async def test_a_body_read_until_the_connection_ends_is_not_kept(
        client: UpstreamClient) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil ")
        await writer.drain()
        writer.write(b"the end")

    server, base = await serve(handler)
    response = await client.post(f"{base}/", b"", {})
    assert await response.read() == b"until the end"
    response.close()
    assert client.idle_connections() == 0
    await server.stop()


async def test_connection_close_and_204_answers(client: UpstreamClient) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await server.read_request(reader)
        writer.write(answer(b"bye", b"Connection: close\r\n"))

    server, base = await serve(handler)
    response = await client.post(f"{base}/", b"", {})
    assert response.status == 204 and await response.read() == b""
    response.close()
    response = await client.post(f"{base}/", b"", {})
    assert await response.read() == b"bye"
    response.close()
    assert server.connections == 1 and client.idle_connections() == 0
    await server.stop()


async def test_a_pooled_connection_ending_before_any_answer_is_replaced(
        client: UpstreamClient) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        writer.write(answer(b"one"))
        await writer.drain()
        if n == 1:      # the keep-alive race: closed as the next request arrives
            await server.read_request(reader)
            return
        while await server.read_request(reader):
            writer.write(answer(b"again"))

    server, base = await serve(handler)
    response = await client.post(f"{base}/", b"", {})
    assert await response.read() == b"one"
    response.close()
    response = await client.post(f"{base}/", b"", {})
    assert await response.read() == b"one"        # the second connection's first answer
    response.close()
    assert server.connections == 2 and len(server.heads) == 3
    await server.stop()


async def test_a_closed_idle_connection_is_not_used_again(client: UpstreamClient) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        writer.write(answer(b"%d" % n))
        await writer.drain()        # then closes

    server, base = await serve(handler)
    for n in (1, 2):
        response = await client.post(f"{base}/", b"", {})
        assert await response.read() == b"%d" % n
        response.close()
        await asyncio.wait_for(_until_idle_closed(client), 5.0)
    assert server.connections == 2 and len(server.heads) == 2
    await server.stop()


async def _until_idle_closed(client: UpstreamClient) -> None:
    while any(not c.closed for pool in client._idle.values() for c in pool):
        await asyncio.sleep(0.01)


async def _until_idle_unusable(client: UpstreamClient) -> None:
    while any(c.reusable for pool in client._idle.values() for c in pool):
        await asyncio.sleep(0.01)


async def test_bytes_on_an_idle_connection_keep_it_from_being_used_again(
        client: UpstreamClient) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        writer.write(answer(b"%d" % n))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"HTTP/1.1 200 OK\r\n")      # unasked for, while the connection idles
        while await server.read_request(reader):
            writer.write(answer(b"late"))

    server, base = await serve(handler)
    response = await client.post(f"{base}/", b"", {})
    assert await response.read() == b"1"
    response.close()
    # until the idle connection has read the unasked bytes (a 0.2 s sleep for it ran out in
    # the same turn of a held loop as the handler's write: the connection was taken first)
    await asyncio.wait_for(_until_idle_unusable(client), 5.0)
    response = await client.post(f"{base}/", b"", {})
    assert await response.read() == b"2"           # a new connection
    response.close()
    await server.stop()


async def test_bytes_after_an_answer_keep_its_connection_out_of_the_pool(
        client: UpstreamClient) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        writer.write(answer(b"body") + b"HTTP/1.1 200 OK\r\n")
        await server.read_request(reader)

    server, base = await serve(handler)
    response = await client.post(f"{base}/", b"", {})
    assert await response.read() == b"body"
    response.close()
    assert client.idle_connections() == 0
    await server.stop()


async def test_a_new_connection_closed_before_the_head_is_an_error(
        client: UpstreamClient) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-")

    server, base = await serve(handler)
    with pytest.raises(UpstreamDisconnected):
        await client.post(f"{base}/", b"", {})
    assert server.connections == 1
    await server.stop()


@pytest.mark.parametrize(("wire", "message"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "before the body ended"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabc", "before the body ended"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n",
     "longer than its size"),
    # a size line that never ends is refused at 64 KiB, not held until the head's 1 MiB
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1" + b"0" * (MAX_CHUNK_LINE + 1),
     f"chunk line over {MAX_CHUNK_LINE >> 10} KiB"),
    # ... and so is one that ends, its line end far past the cap
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;" + b"x" * 1_000_000
     + b"\r\nhello\r\n0\r\n\r\n", f"chunk line over {MAX_CHUNK_LINE >> 10} KiB"),
])
async def test_bodies_cut_short_or_badly_framed_raise(
        client: UpstreamClient, wire: bytes, message: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        writer.write(wire)
        await writer.drain()

    server, base = await serve(handler)
    response = await client.post(f"{base}/", b"", {})
    with pytest.raises(UpstreamPayloadError, match=message):
        await response.read()
    response.close()
    assert client.idle_connections() == 0
    await server.stop()


async def test_a_bad_status_line_is_a_payload_error(client: UpstreamClient) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await asyncio.sleep(1)

    server, base = await serve(handler)
    with pytest.raises(UpstreamPayloadError, match="bad status line"):
        await client.post(f"{base}/", b"", {})
    await server.stop()


async def test_refused_connections_and_other_schemes_are_connect_errors(
        client: UpstreamClient) -> None:
    server, base = await serve(lambda reader, writer, n: asyncio.sleep(0))
    await server.stop()
    with pytest.raises(UpstreamConnectError, match="cannot connect"):
        await client.post(f"{base}/", b"", {})
    with pytest.raises(UpstreamConnectError, match="only http:// and https://"):
        await client.post("ftp://127.0.0.1:1/", b"", {})


async def test_silence_is_a_timeout_and_the_connection_is_dropped() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        if n == 2:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab")
            await writer.drain()
        await server.read_request(reader)        # waits for the client to hang up

    server, base = await serve(handler)
    client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=0.2)
    with pytest.raises(TimeoutError):
        await client.post(f"{base}/", b"", {})                # no head at all
    await asyncio.wait_for(server.closed_by_client.wait(), 5.0)
    response = await client.post(f"{base}/", b"", {})
    with pytest.raises(TimeoutError):
        await response.read()                                  # the body stalls
    response.close()
    assert client.idle_connections() == 0
    await client.close()
    await server.stop()


async def test_closing_an_unfinished_answer_hangs_up(client: UpstreamClient) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await writer.drain()
        await server.read_request(reader)        # EOF once the client hangs up

    server, base = await serve(handler)
    response = await client.post(f"{base}/", b"", {})
    async for chunk in response.chunks():
        assert chunk == b"abc"
        break
    response.close()
    await asyncio.wait_for(server.closed_by_client.wait(), 5.0)
    assert client.idle_connections() == 0
    await server.stop()


async def test_a_large_body_is_read_whole_under_flow_control() -> None:
    body = bytes(range(256)) * 16_384             # 4 MiB, held at most 64 KiB at a time

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        writer.write(answer(body))
        await writer.drain()

    server, base = await serve(handler)
    client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=5.0, high_water=64 * 1024)
    response = await client.post(f"{base}/", b"", {})
    received = bytearray()
    async for chunk in response.chunks():
        received += chunk
        await asyncio.sleep(0)
    assert bytes(received) == body
    response.close()
    await client.close()
    await server.stop()


async def test_idle_connections_expire_and_are_bounded() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            writer.write(answer(b"ok"))

    server, base = await serve(handler)
    client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0, keepalive_s=0.0,
                            max_idle=1)
    for _ in range(2):
        response = await client.post(f"{base}/", b"", {})
        await response.read()
        response.close()
        await asyncio.sleep(0.01)
    assert server.connections == 2                 # the idle one had expired
    first = await client.post(f"{base}/", b"", {})
    second = await client.post(f"{base}/", b"", {})
    for response in (first, second):
        await response.read()
        response.close()
    assert client.idle_connections() == 1          # the second one beyond max_idle closed
    await client.close()
    assert client.idle_connections() == 0
    await server.stop()


def test_request_heads() -> None:
    head = encode_request(URL("http://[::1]:8001/v1/completions?a=b%20c"), b"xy",
                          {"Content-Type": "application/json", "Connection": "close",
                           "content-length": "99", "Authorization": "Bearer k"})
    assert head == (b"POST /v1/completions?a=b%20c HTTP/1.1\r\nHost: [::1]:8001\r\n"
                    b"Content-Type: application/json\r\nAuthorization: Bearer k\r\n"
                    b"Content-Length: 2\r\n\r\nxy")
    assert encode_request(URL("http://worker/"), b"", {}).startswith(
        b"POST / HTTP/1.1\r\nHost: worker\r\n")
    assert encode_request(URL("http://worker:80/metrics"), None, {}, "GET") == (
        b"GET /metrics HTTP/1.1\r\nHost: worker\r\n\r\n")


def test_header_bytes_that_are_not_utf8_go_out_as_they_came_in() -> None:
    """aiohttp hands a client's header bytes that are not UTF-8 over as surrogate escapes;
    the hop to the worker writes those bytes again, unchanged."""
    received = b"Bearer k\xff\xfe"
    value = received.decode("utf-8", "surrogateescape")
    head = encode_request(URL("http://worker/v1/completions"), b"{}",
                          {"Authorization": value, "X-Tenant": "t\u00e9"})
    assert b"\r\nAuthorization: Bearer k\xff\xfe\r\n" in head
    assert b"\r\nX-Tenant: t\xc3\xa9\r\n" in head


async def test_gets_share_the_keep_alive_pool(client: UpstreamClient) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            writer.write(answer(b"metrics %d" % len(server.heads)))

    server, base = await serve(handler)
    for n in (1, 2):
        response = await client.get(f"{base}/metrics")
        assert (response.status, await response.read()) == (200, b"metrics %d" % n)
        response.close()
    assert server.connections == 1
    assert server.heads[0].startswith(b"GET /metrics HTTP/1.1\r\n")
    assert b"Content-Length" not in server.heads[0] and server.bodies == [b"", b""]
    await server.stop()


def test_header_values_with_line_breaks_are_refused() -> None:
    async def post() -> None:
        client = UpstreamClient(connect_timeout_s=1.0, read_timeout_s=1.0)
        await client.post("http://127.0.0.1:9/", b"", {"X-Bad": "a\r\nInjected: 1"})

    with pytest.raises(ValueError, match="line break"):
        asyncio.run(post())


async def test_a_workers_own_authorization_replaces_the_clients() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            writer.write(answer(b"{}"))

    server, base = await serve(handler)
    keyed = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0,
                           authorizations={base: "Bearer worker-key"})
    plain = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0)
    try:
        for client, headers in ((keyed, {"authorization": "Bearer client-key", "X-A": "1"}),
                                (keyed, {}),
                                (plain, {"Authorization": "Bearer client-key"})):
            response = await client.post(f"{base}/v1/completions", b"{}", headers)
            await response.read()
            response.close()
            response = await client.get(f"{base}/v1/models")
            await response.read()
            response.close()
    finally:
        await keyed.close()
        await plain.close()
        await server.stop()
    auth = [[line for line in head.split(b"\r\n") if line.lower().startswith(b"authorization")]
            for head in server.heads]
    assert auth == [[b"Authorization: Bearer worker-key"]] * 4 + [
        [b"Authorization: Bearer client-key"], []]
    assert b"X-A: 1" in server.heads[0]        # the other headers pass as they were


def prefixed_workers(base: str, **each: dict[str, object]) -> list[WorkerInfo]:
    """Workers ``a`` and ``b`` behind one reverse proxy at ``base``, on the path prefixes
    ``/a`` and ``/b``, each with the fleet entry fields ``each[id]``."""
    model = "meta-llama/Llama-3.1-8B-Instruct"
    fleet = parse_fleet({"models": {model: {"arch": "llama-3.1-8b"}}, "workers": [
        {"id": name, "url": f"{base}/{name}", "gpu": "h100", "models": [model], **fields}
        for name, fields in each.items()]})
    return [spec.info for spec in fleet.workers]


async def test_workers_on_path_prefixes_of_one_origin_get_their_own_keys() -> None:
    """Two workers behind one reverse proxy: each request under a worker's base URL carries
    that worker's key (keyed by origin, the last worker's key went to both)."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            writer.write(answer(b"{}"))

    server, base = await serve(handler)
    infos = prefixed_workers(base, a={"api_key_env": "KA"}, b={"api_key_env": "KB"})
    client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0, authorizations=(
        worker_authorizations(infos, {"KA": "key-a", "KB": "key-b"})))
    try:
        for path in ("/a/v1/chat/completions", "/b/v1/chat/completions", "/a/metrics",
                     "/b/v1/models", "/a", "/ab/v1/models"):
            response = await client.post(f"{base}{path}", b"{}", {"Authorization": "Bearer c"})
            await response.read()
            response.close()
    finally:
        await client.close()
        await server.stop()
    sent = [next(line for line in head.split(b"\r\n") if line.startswith(b"Authorization"))
            for head in server.heads]
    assert sent == [b"Authorization: Bearer key-a", b"Authorization: Bearer key-b",
                    b"Authorization: Bearer key-a", b"Authorization: Bearer key-b",
                    b"Authorization: Bearer key-a",
                    b"Authorization: Bearer c"]     # /ab is under neither worker
    assert server.connections == 1                  # one origin, one pool


async def test_workers_on_path_prefixes_of_one_origin_get_their_own_tls_context(
        tmp_path: Path) -> None:
    """``a`` trusts the CA that issued the proxy's certificate, ``b`` another CA: ``a`` is
    reached, ``b`` is refused (keyed by origin, ``b``'s context verified both)."""
    files = make_tls_files(tmp_path)
    (tmp_path / "other").mkdir()
    other = make_tls_files(tmp_path / "other")

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            writer.write(answer(b"{}"))

    server = RawServer(handler, server_tls_context(files.certfile, files.keyfile))
    base = await server.start()
    infos = prefixed_workers(base, a={"tls_ca_file": str(files.ca_file)},
                             b={"tls_ca_file": str(other.ca_file)})
    client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0,
                            tls=worker_tls_contexts(infos))
    try:
        response = await client.get(f"{base}/a/v1/models")
        assert response.status == 200
        await response.read()
        response.close()
        with pytest.raises(UpstreamConnectError, match="certificate verify failed"):
            await client.get(f"{base}/b/v1/models")
    finally:
        await client.close()
        await server.stop()


async def test_an_ipv6_worker_that_refuses_is_named_in_brackets(client: UpstreamClient) -> None:
    """It read 'cannot connect to ::1:P', where the port cannot be told from the address."""
    with socket.socket(socket.AF_INET6) as unused:      # bound, never listening: refused
        unused.bind(("::1", 0))
        port = unused.getsockname()[1]
        with pytest.raises(UpstreamConnectError, match=rf"^cannot connect to \[::1\]:{port}: "):
            await client.get(f"http://[::1]:{port}/metrics")


def test_origin_of_is_the_pool_key() -> None:
    assert origin_of("http://127.0.0.1:8101/v1/models") == ("127.0.0.1", 8101)
    assert origin_of("http://worker.local") == ("worker.local", 80)


async def test_https_workers_are_reached_over_tls_with_keep_alive(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            writer.write(chunked(b"data: 1\n\n", b"data: [DONE]\n\n"))

    server = RawServer(handler, server_tls_context(files.certfile, files.keyfile))
    base = await server.start()
    verifying = ssl.create_default_context(cafile=str(files.ca_file))
    certificates: list[tuple[tuple[str, int], float]] = []
    client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0,
                            tls={base: verifying},
                            on_certificate=lambda origin, not_after: certificates.append(
                                (origin, not_after)))
    stranger = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0)   # system CAs only
    try:
        for _ in range(3):
            response = await client.post(f"{base}/v1/completions", b"{}", {})
            assert response.status == 200
            assert b"".join([c async for c in response.chunks()]) == \
                b"data: 1\n\ndata: [DONE]\n\n"
            response.close()
        assert server.connections == 1        # one TLS handshake for the three
        expiry = x509.load_pem_x509_certificate(files.certfile.read_bytes()).not_valid_after_utc
        assert certificates == [(origin_of(base), expiry.timestamp())]
        with pytest.raises(UpstreamConnectError, match="certificate verify failed"):
            await stranger.get(f"{base}/metrics")
    finally:
        await client.close()
        await stranger.close()
        await server.stop()
    assert server.heads[0].startswith(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:")


async def test_a_certificate_for_another_host_is_refused(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path, hosts=("worker.example.com",))

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            writer.write(answer(b"{}"))

    server = RawServer(handler, server_tls_context(files.certfile, files.keyfile))
    base = await server.start()
    client = UpstreamClient(connect_timeout_s=2.0, read_timeout_s=2.0, tls={
        base: ssl.create_default_context(cafile=str(files.ca_file))})
    try:
        with pytest.raises(UpstreamConnectError, match=r"IP address mismatch|doesn't match"):
            await client.get(f"{base}/metrics")
    finally:
        await client.close()
        await server.stop()


async def test_a_pooled_connection_serves_only_the_scheme_and_context_it_was_made_with(
        client: UpstreamClient) -> None:
    """Pooled by host and port alone, a plain connection was reused for an https:// request
    to the same origin (a reloaded fleet moving a worker to TLS): it went unencrypted."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            writer.write(answer(b"{}"))

    server, base = await serve(handler)
    response = await client.get(f"{base}/health")
    assert response.status == 200
    await response.read()
    response.close()
    assert client.idle_connections() == 1
    with pytest.raises((UpstreamConnectError, TimeoutError)):   # no TLS handshake there
        await client.get(base.replace("http://", "https://") + "/health")
    assert len(server.heads) == 1                   # nothing went in the clear
    await server.stop()


async def test_a_head_of_a_few_hundred_kilobytes_is_read_and_a_larger_one_refused(
        client: UpstreamClient) -> None:
    """vLLM describes a binary pooling answer's vectors in a header, ~105 bytes each: 3,000
    of them failed the former 64 KiB limit (a 502, and a healthy worker counted as failing)."""
    sizes = iter([350_000, MAX_HEAD + 10])

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            writer.write(answer(b"{}", b"metadata: " + b"m" * next(sizes) + b"\r\n"))

    server, base = await serve(handler)
    response = await client.post(f"{base}/pooling", b"{}", {})
    assert response.status == 200 and len(response.headers["metadata"]) == 350_000
    assert await response.read() == b"{}"
    response.close()
    with pytest.raises(UpstreamHeadTooLarge, match="response head over 1024 KiB"):
        await client.post(f"{base}/pooling", b"{}", {})
    await server.stop()


async def test_a_repeated_header_is_joined_once(client: UpstreamClient) -> None:
    """Joined line by line, a megabyte of repeated lines took seconds on the event loop."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            writer.write(answer(b"{}", b"x-many: a\r\n" * 60_000))

    server, base = await serve(handler)
    response = await client.post(f"{base}/", b"{}", {})
    assert response.headers["x-many"] == ", ".join(["a"] * 60_000)
    response.close()
    await server.stop()


async def test_a_request_is_sent_again_at_most_once_whatever_the_pool_holds(
        client: UpstreamClient) -> None:
    """A worker that reads each request and then drops its connection, with six kept-alive
    connections to it in the pool: the request went out on each of them in turn, then on a
    new one (seven deliveries of one POST). It is sent again once, on a new connection."""
    answering = [True]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        while await server.read_request(reader):
            if not answering[0]:
                return                  # read, then the connection ends with no answer
            await asyncio.sleep(0.05)   # (the six are in flight together)
            writer.write(answer(b"ok"))
            await writer.drain()

    server, base = await serve(handler)
    responses = await asyncio.gather(*(client.post(f"{base}/", b"", {}) for _ in range(6)))
    for response in responses:
        assert await response.read() == b"ok"
        response.close()
    assert client.idle_connections() == 6 and len(server.heads) == 6
    answering[0] = False
    with pytest.raises(UpstreamDisconnected):
        await client.post(f"{base}/", b"{}", {})
    assert len(server.heads) == 6 + 2           # the first attempt and one more
    assert server.connections == 7              # the one more on a new connection
    await server.stop()


@pytest.mark.parametrize("status_line", [b"HTTP/1.1 099 Weird", b"HTTP/1.1 2000 OK",
                                         b"HTTP/1.1 600 Beyond"])
async def test_a_status_outside_100_to_599_is_a_payload_error(
        client: UpstreamClient, status_line: bytes) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        writer.write(status_line + b"\r\nContent-Length: 0\r\n\r\n")
        await asyncio.sleep(1)

    server, base = await serve(handler)
    with pytest.raises(UpstreamPayloadError, match="bad status line"):
        await client.post(f"{base}/", b"", {})
    await server.stop()


@pytest.mark.parametrize("end_after_s", [0.05, None], ids=["end comes", "silent"])
async def test_an_answer_closed_before_its_end_is_read_on_for_a_moment(
        client: UpstreamClient, end_after_s: float | None) -> None:
    """A stream's caller that has its last event hands the rest to ``close_when_whole``: the
    body's end read in the background keeps the connection; a silent worker loses it."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        writer.write(b"e\r\ndata: [DONE]\n\n\r\n")
        await writer.drain()
        if end_after_s is None:
            await asyncio.sleep(5)
            return
        await asyncio.sleep(end_after_s)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await server.read_request(reader)

    server, base = await serve(handler)
    response = await client.post(f"{base}/", b"", {})
    chunks = response.chunks()
    assert await chunks.__anext__() == b"data: [DONE]\n\n"
    await chunks.aclose()
    response.close_when_whole(0.3)
    response.close()                                # (nothing more: handed over)
    await asyncio.sleep(0.4)
    assert client.idle_connections() == (1 if end_after_s is not None else 0)
    await server.stop()
