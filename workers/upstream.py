"""The HTTP/1.1 client for the router's hops to workers: the proxy's POSTs, the scraper's GETs.

aiohttp's ``ClientSession`` spends about 150 µs of CPU on each request it sends (request and
response objects, timers, tracing and cookie hooks, a stream reader per body): a third of
what the router spends per request. This client does only what those hops need. It keeps
pools of keep-alive connections per worker (``asyncio.Protocol`` objects), writes each
request in one write, reads the response head once and hands the body on as it arrives,
framed by ``Content-Length``, by the chunked transfer coding, or by the end of the
connection.

* ``post(url, body, headers)`` (and ``get(url)``) returns an ``UpstreamResponse`` once the
  response head is in:
  ``status``, ``content_type``, ``headers``; then ``read()`` (the whole body) or ``chunks()``
  (body bytes as they arrive), and ``close()``, which returns a finished connection to its
  pool and drops an unfinished one (closing the connection is what makes vLLM abort).
* Errors: ``UpstreamConnectError`` (refused, unreachable), ``UpstreamConnectTimeout``,
  ``UpstreamDisconnected`` (closed before the whole head arrived), ``UpstreamPayloadError``
  (the body cut short or badly framed), and ``TimeoutError`` when no byte arrives within the
  read timeout, for the head or between two body reads.
* A pooled connection the worker has closed meanwhile fails before any byte of an answer;
  such a request is sent again once, on a new connection, never on another pooled one (a
  worker that read it and then hung up cannot be told apart from one that closed the idle
  connection as it was sent: it gets it twice at most).
* Idle connections are kept for ``keepalive_s`` and at most ``max_idle`` per worker, and
  none is used again once ``max_age_s`` old (a worker's name moved to another address is
  followed though frequent requests keep its old connections from ever idling out): each
  connection's own age limit is drawn from ``[1 - AGE_JITTER, 1] × max_age_s`` by the
  client's ``random`` source, so connections opened in one burst are not all made again
  in one burst when they reach it (a storm of handshakes, TLS ones included). A body not
  read yet is held up to ``high_water`` bytes, then the socket stops being read.
* ``clock`` (``time.monotonic`` unless given) times the connections' idleness and age.
* A worker named by an IP address is connected to directly. One named by a host name is
  resolved (``resolve``, the loop's ``getaddrinfo`` unless given) on each new connection and
  its addresses are raced as RFC 8305's Happy Eyeballs does, the next one tried
  ``HAPPY_EYEBALLS_DELAY_S`` after the one before unless that has failed already: an
  address that silently drops connection attempts (an IPv6 path broken behind an AAAA
  record) costs that delay, not the whole connect timeout.
* ``https://`` URLs are reached over TLS: with the context ``tls`` maps their worker's base
  URL to (``workers.tls.worker_tls_contexts``), else one trusting the system's CAs. A
  certificate that does not verify is an ``UpstreamConnectError`` saying why; one that does
  is reported to ``on_certificate(origin, not_after)`` (its expiry, Unix seconds) on each new
  connection.
* ``authorizations`` maps a worker's base URL (``base_url(url)``) to the ``Authorization``
  header every request under it carries, replacing one the caller passed on (a client's): how
  the router reaches workers started with ``--api-key`` (``workers.credentials``).
  ``set_credentials`` replaces both maps (a reloaded fleet file).
* Keys and TLS contexts are found by the longest base URL a request's URL is under, not by
  its origin: workers behind one reverse proxy on path prefixes (``http://gw/a``,
  ``http://gw/b``) share an origin, and a pool of connections, but not a key.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import ipaddress
import os
import random
import socket
import ssl
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Final, Generic, TypeVar, cast

import aiohappyeyeballs
from aiohappyeyeballs import AddrInfoType
from yarl import URL

Origin = tuple[str, int]             # (host, port): one pool of connections
BaseUrl = str       # a worker's URL as base_url writes it: one credential, one TLS context
# a host name and port to their addresses, as ``loop.getaddrinfo(host, port,
# type=SOCK_STREAM)`` gives them
Resolve = Callable[[str, int], Awaitable[Sequence[AddrInfoType]]]
_V = TypeVar("_V")

# how long an address is given before the next one is tried too: RFC 8305's recommended
# delay, as curl and aiohttp use
HAPPY_EYEBALLS_DELAY_S: Final = 0.25

# the share of ``max_age_s`` a connection's own age limit may fall short of it by, drawn for
# each connection: those opened together are made again over the last tenth of the limit
AGE_JITTER: Final = 0.1

# response head size limit (status line and headers): vLLM's binary pooling answers describe
# their vectors in a header, about 121 bytes each (8,600 vectors in 1 MiB)
MAX_HEAD: Final = 1024 * 1024
# a chunked body's size line (hex digits, perhaps extensions) or trailer line: far more than
# any server writes, far less than a head
MAX_CHUNK_LINE: Final = 64 * 1024
_CRLF: Final = b"\r\n"
_HEAD_END: Final = b"\r\n\r\n"


class UpstreamError(Exception):
    """Base of the client's own errors."""


class UpstreamConnectError(UpstreamError):
    """No connection could be made."""


class UpstreamLocalError(UpstreamConnectError):
    """No connection could be made for want of the router's own resources (its open-file
    limit, the system's, memory): no fault of the worker's."""


# the errors of ``connect`` that say the router, not the worker, is out of something (its
# file descriptors, memory, local ports)
_LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM,
                           errno.EADDRNOTAVAIL})
# a name lookup failing for want of the router's memory, not for the name's sake
_LOCAL_LOOKUP_ERRORS = frozenset({socket.EAI_MEMORY})


def out_of_descriptors() -> bool:
    """Whether this process can open no more files now (a failed connect says so only
    sometimes: uvloop's name lookup fails as an unknown host instead)."""
    try:
        fd = os.open(os.devnull, os.O_RDONLY)
    except OSError as exc:
        return exc.errno in (errno.EMFILE, errno.ENFILE)
    os.close(fd)
    return False


class UpstreamConnectTimeout(UpstreamError, TimeoutError):
    """No connection within the connect timeout (a ``TimeoutError`` too)."""


class UpstreamDisconnected(UpstreamError):
    """The connection ended before the whole response head arrived."""


class UpstreamPayloadError(UpstreamError):
    """The response body ended early or was badly framed."""


class UpstreamHeadTooLarge(UpstreamPayloadError):
    """The response head is over ``MAX_HEAD``: the answer's size, not a failing worker
    (vLLM describes a binary answer's every vector in a header)."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection and the parser of the response being read on it."""

    def __init__(self, high_water: int, expires_at: float) -> None:
        self._high_water = high_water
        self.transport: asyncio.Transport | None = None
        self.tls: ssl.SSLContext | None = None   # what verified it (None: plain TCP)
        self.closed = False
        self.idle_since = 0.0
        self.expires_at = expires_at   # not used again from then on (its age limit)
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._reset()

    def _reset(self) -> None:
        self._head = bytearray()
        self.head: tuple[int, dict[str, str]] | None = None
        self.received_any = False
        self._body: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._framing = "none"     # "length", "chunked", "close" or "none"
        self._remaining = 0        # body bytes left ("length") or in the chunk ("chunked")
        self._chunk_state = "size"  # "size", "data", "data-end", "trailer"
        self._line = bytearray()
        self.complete = False      # the whole response is in
        self.reusable = False
        self.error: Exception | None = None

    # --- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport has the Transport methods without subclassing it
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            if self.head is None:
                searched = max(0, len(self._head) - 3)   # the end may straddle two reads
                self._head += data
                end = self._head.find(_HEAD_END, searched)
                if end < 0 or end > MAX_HEAD:
                    if len(self._head) > MAX_HEAD:
                        raise UpstreamHeadTooLarge(
                            f"response head over {MAX_HEAD >> 10} KiB")
                    return
                rest = bytes(self._head[end + 4:])
                self._parse_head(bytes(self._head[:end]))
                if self.head is None:        # an interim 1xx answer: read the next head
                    self._head = bytearray()
                    if rest:
                        self.data_received(rest)
                    return
                data = rest
            if data and not self.complete:
                self._feed_body(data)
            elif data:
                self.reusable = False        # bytes after the answer: do not reuse
        except UpstreamError as exc:
            self._fail(exc)
            if self.transport is not None:
                self.transport.close()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        if self.head is None:
            self._fail(UpstreamDisconnected(
                f"connection closed before the response head{f': {exc}' if exc else ''}"))
        elif not self.complete:
            if self._framing == "close" and exc is None:
                self.complete = True
            else:
                self._fail(UpstreamPayloadError(
                    f"connection closed before the body ended{f': {exc}' if exc else ''}"))
        self._wake()

    # --- parsing -----------------------------------------------------------------------------
    def _parse_head(self, head: bytes) -> None:
        lines = head.split(_CRLF)
        parts = lines[0].split(b" ", 2)
        # a status is three digits, 100 to 599 (RFC 9110 §15)
        if (len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(parts[1]) != 3
                or not parts[1].isdigit() or not b"100" <= parts[1] <= b"599"):
            raise UpstreamPayloadError(f"bad status line {lines[0][:80]!r}")
        status = int(parts[1])
        if 100 <= status < 200:
            return
        values: dict[str, list[str]] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise UpstreamPayloadError(f"bad header line {line[:80]!r}")
            key = name.strip().lower().decode("latin-1")
            values.setdefault(key, []).append(value.strip().decode("latin-1"))
        # a repeated header's values joined once (joined line by line, 1 MiB of them took
        # seconds)
        headers = {key: ", ".join(texts) for key, texts in values.items()}
        connection = headers.get("connection", "").lower()
        keep_alive = parts[0] == b"HTTP/1.1" and "close" not in connection
        if status in (204, 304):
            self._framing = "none"
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing = "chunked"
        elif "content-length" in headers:
            length = headers["content-length"].strip()
            if not length.isdigit():
                raise UpstreamPayloadError(f"bad Content-Length {length!r}")
            self._framing, self._remaining = "length", int(length)
        else:
            self._framing, keep_alive = "close", False
        self.head = (status, headers)
        self.reusable = keep_alive
        if self._framing == "none" or (self._framing == "length" and self._remaining == 0):
            self.complete = True

    def _feed_body(self, data: bytes) -> None:
        if self._framing == "length":
            if len(data) > self._remaining:
                self.reusable = False
                data = data[:self._remaining]
            self._remaining -= len(data)
            self._push(data)
            if self._remaining == 0:
                self.complete = True
        elif self._framing == "close":
            self._push(data)
        else:
            self._feed_chunked(data)

    def _feed_chunked(self, data: bytes) -> None:
        if self._line:        # a size or end-of-chunk line split across reads
            data = bytes(self._line) + data
            self._line = bytearray()
        position, end = 0, len(data)
        while position < end and not self.complete:
            state = self._chunk_state
            if state == "data":
                take = min(self._remaining, end - position)
                self._push(data[position:position + take] if take < end else data)
                position += take
                self._remaining -= take
                if self._remaining == 0:
                    self._chunk_state = "data-end"
                continue
            newline = data.find(b"\n", position, position + MAX_CHUNK_LINE + 1)
            if newline < 0:
                if end - position > MAX_CHUNK_LINE:     # no line end within the cap
                    raise UpstreamPayloadError(
                        f"chunk line over {MAX_CHUNK_LINE >> 10} KiB")
                self._line += data[position:]
                return
            stop = newline - 1 if newline > position and data[newline - 1] == 13 else newline
            line = data[position:stop]         # without its CR LF
            position = newline + 1
            if state == "size":
                size_text = line.split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise UpstreamPayloadError(f"bad chunk size {size_text[:20]!r}") from None
                if size < 0:
                    raise UpstreamPayloadError("negative chunk size")
                if size == 0:
                    self._chunk_state = "trailer"
                else:
                    self._chunk_state, self._remaining = "data", size
            elif state == "data-end":
                if line:
                    raise UpstreamPayloadError("chunk data longer than its size")
                self._chunk_state = "size"
            elif not line:                   # "trailer": the empty line ends the message
                self.complete = True
        if position < end:
            self.reusable = False            # bytes after the last chunk

    def _push(self, data: bytes) -> None:
        if not data:
            return
        self._body.append(data)
        self._buffered += len(data)
        if self._buffered > self._high_water and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()

    def _fail(self, exc: Exception) -> None:
        if self.error is None:
            self.error = exc

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- for UpstreamResponse ------------------------------------------------------------
    async def wait(self, timeout_s: float) -> None:
        """Until something changes (data, the end, an error); ``TimeoutError`` when nothing
        does for ``timeout_s``. One timer per connection, moved lazily: it is armed when
        none is pending and, when it fires before the deadline, armed again for it, so a
        stream of reads does not create and cancel a timer each."""
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + timeout_s
        if self._timer is None:
            self._timer = loop.call_at(self._deadline, self._on_timer)
        waiter = self._waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _on_timer(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        loop = waiter.get_loop()
        if loop.time() < self._deadline:
            self._timer = loop.call_at(self._deadline, self._on_timer)
        else:
            waiter.set_exception(TimeoutError())

    def stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def take(self) -> bytes:
        """The body bytes received and not yet taken."""
        if not self._body:
            return b""
        data = self._body.popleft() if len(self._body) == 1 else b"".join(self._body)
        self._body.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def start(self, request: bytes) -> None:
        self._reset()
        assert self.transport is not None
        self.transport.write(request)


class UpstreamResponse:
    """A worker's answer, head read; the body is read with ``read`` or ``chunks``."""

    __slots__ = ("_client", "_connection", "_key", "_read_timeout_s", "content_type", "headers",
                 "origin", "status")

    def __init__(self, client: UpstreamClient, key: tuple[str, int], connection: _Connection,
                 origin: URL, read_timeout_s: float) -> None:
        assert connection.head is not None
        self._client = client
        self._key = key
        self._connection: _Connection | None = connection
        self._read_timeout_s = read_timeout_s
        self.status, self.headers = connection.head
        self.content_type = self.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        self.origin = origin

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """Body bytes as they arrive (each at least one byte), until the body ends."""
        connection = self._connection
        if connection is None:
            return
        while True:
            data = connection.take()
            if data:
                yield data
                continue
            if connection.complete:
                return
            if connection.error is not None:
                raise connection.error
            await connection.wait(self._read_timeout_s)

    async def read(self) -> bytes:
        parts = [data async for data in self.chunks()]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        """Give a finished keep-alive connection back to the pool; close any other one."""
        connection, self._connection = self._connection, None
        if connection is not None:
            self._put_back(connection)

    def close_when_whole(self, within_s: float) -> None:
        """``close``, once the rest of the body has come: an answer whose caller has all it
        needs (a stream's last event) while its body's end is still on its way is read on
        for up to ``within_s`` in the background, and its connection kept if it ends then,
        closed if not (a worker silent after its last event). ``close`` after it does
        nothing."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if connection.complete or connection.error is not None:
            self._put_back(connection)
            return
        task = asyncio.get_running_loop().create_task(self._read_to_end(connection, within_s))
        self._client._draining.add(task)
        task.add_done_callback(self._client._draining.discard)

    async def _read_to_end(self, connection: _Connection, within_s: float) -> None:
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within_s):
                    while not connection.complete and connection.error is None:
                        connection.take()
                        await connection.wait(within_s)
        finally:
            self._put_back(connection)

    def _put_back(self, connection: _Connection) -> None:
        connection.stop_timer()
        if connection.complete and connection.reusable and not connection.closed:
            self._client._release(self._key, connection)
        elif connection.transport is not None:
            connection.transport.close()


class UpstreamClient:
    """Keep-alive HTTP/1.1 requests to workers (``http://`` and ``https://``)."""

    def __init__(self, connect_timeout_s: float, read_timeout_s: float,
                 keepalive_s: float = 60.0, max_idle: int = 256,
                 high_water: int = 1 << 20,
                 authorizations: Mapping[BaseUrl, str] | None = None,
                 tls: Mapping[BaseUrl, ssl.SSLContext] | None = None,
                 on_certificate: Callable[[Origin, float], None] | None = None,
                 max_age_s: float = 300.0, resolve: Resolve | None = None,
                 random_source: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``random_source`` draws each connection's age limit (its own ``random.Random``
        unless given); ``clock`` tells the time of connections' idleness and age."""
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.keepalive_s = keepalive_s
        self.max_age_s = max_age_s
        self._random = random_source if random_source is not None else random.Random()
        self._clock = clock
        self.max_idle = max_idle
        self._resolve = resolve or _getaddrinfo
        self.high_water = high_water
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._retained: frozenset[Origin] | None = None    # None: pool for any origin
        self._swept_at = clock()               # when idle connections were last expired
        self._sweep_timer: asyncio.TimerHandle | None = None    # armed while some are idle
        self._closed = False
        self._draining: set[asyncio.Task[None]] = set()   # answers read on to their end
        self._authorizations = _ByBase(authorizations or {})
        self._tls = _ByBase(tls or {})
        self._system_tls: ssl.SSLContext | None = None
        self._on_certificate = on_certificate

    def set_credentials(self, authorizations: Mapping[BaseUrl, str],
                        tls: Mapping[BaseUrl, ssl.SSLContext]) -> None:
        """Take a reloaded fleet file's keys and TLS contexts. Idle connections made with a
        TLS context no worker at their origin uses any more are closed (they were verified by
        the one before); one in use then is not taken from the pool again (a connection serves
        only the scheme and context it was made with)."""
        contexts = _ByBase(tls)
        for key, connections in list(self._idle.items()):
            in_use = contexts.at_origin(key)
            for connection in [c for c in connections if c.tls is not None
                               and c.tls is not self._system_tls and c.tls not in in_use]:
                connections.remove(connection)
                if connection.transport is not None:
                    connection.transport.close()
            if not connections:
                del self._idle[key]
        self._authorizations = _ByBase(authorizations)
        self._tls = contexts

    def retain_origins(self, origins: Iterable[Origin]) -> None:
        """Pool connections only to ``origins`` from now on (a reloaded fleet file's
        workers): idle ones to any other are closed now, and one in use there is closed
        when its answer ends (a removed worker that stayed up kept the router's idle
        connections, and their file descriptors, for good)."""
        self._retained = frozenset(origins)
        for key in [key for key in self._idle if key not in self._retained]:
            for connection in self._idle.pop(key):
                if connection.transport is not None:
                    connection.transport.close()

    async def post(self, url: str | URL, body: bytes,
                   headers: Mapping[str, str]) -> UpstreamResponse:
        return await self.request("POST", url, body, headers)

    async def get(self, url: str | URL) -> UpstreamResponse:
        return await self.request("GET", url, None, {})

    async def request(self, method: str, url: str | URL, body: bytes | None,
                      headers: Mapping[str, str], head_timeout_s: float | None = None,
                      keep_waiting: Callable[[], bool] | None = None) -> UpstreamResponse:
        """Send ``method`` (``body``: None sends none and no ``Content-Length``) and return
        the answer once its head is in: within the read timeout, or, past it, within
        ``head_timeout_s`` while ``keep_waiting()`` says so at each read timeout's end (a
        whole answer's head comes when the engine has generated all of it)."""
        # (a request waited for only within the read timeout reads no clock)
        head_deadline = (asyncio.get_running_loop().time() + head_timeout_s
                         if keep_waiting is not None and head_timeout_s is not None else None)
        target = url if isinstance(url, URL) else URL(url)
        if target.scheme not in ("http", "https") or not target.host:
            raise UpstreamConnectError(
                f"only http:// and https:// URLs are supported, not {str(target)!r}")
        key = origin_of(target)
        authorization = self._authorizations.find(target)
        if authorization is not None:
            headers = _with_authorization(headers, authorization)
        request = encode_request(target, body, headers, method)
        tls = self._tls_for(target) if target.scheme == "https" else None
        sent_again = False
        while True:
            connection = None if sent_again else self._pooled(key, tls)
            reused = connection is not None
            if connection is None:
                connection = await self._connect(key, tls)
            connection.start(request)
            try:
                while connection.head is None:
                    if connection.error is not None:
                        raise connection.error
                    try:
                        await connection.wait(self.read_timeout_s)
                    except TimeoutError:
                        if (head_deadline is None or keep_waiting is None
                                or asyncio.get_running_loop().time() >= head_deadline
                                or not keep_waiting()):
                            raise
            except UpstreamDisconnected:
                connection.stop_timer()
                if reused and not connection.received_any:
                    # the worker closed this idle connection as the request went out: sent
                    # again once, on a new connection (the pool's others may be as stale,
                    # and a worker that read it before hanging up must not get it again)
                    sent_again = True
                    continue
                raise
            except BaseException:
                connection.stop_timer()
                if connection.transport is not None:
                    connection.transport.close()
                raise
            return UpstreamResponse(self, key, connection, target.origin(),
                                    self.read_timeout_s)

    async def close(self) -> None:
        self._closed = True
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        for task in list(self._draining):      # answers read on: their connections close
            task.cancel()
        await asyncio.gather(*self._draining, return_exceptions=True)
        for connections in self._idle.values():
            for connection in connections:
                if connection.transport is not None:
                    connection.transport.close()
        self._idle.clear()

    def idle_connections(self) -> int:
        return sum(len(connections) for connections in self._idle.values())

    def _pooled(self, key: tuple[str, int], tls: ssl.SSLContext | None) -> _Connection | None:
        """An idle connection to ``key`` made with ``tls``, the latest released first. One
        made with another context is left in the pool: it serves another worker at this
        origin (a reverse proxy's other path prefix) whose fleet entry names another CA."""
        connections = self._idle.get(key)
        if not connections:
            return None
        now = self._clock()
        oldest_allowed = now - self.keepalive_s
        _expire(connections, oldest_allowed)
        for index in range(len(connections) - 1, -1, -1):
            connection = connections[index]
            if connection.tls is not tls:
                continue
            del connections[index]
            transport = connection.transport
            if (connection.reusable and not connection.closed
                    and connection.idle_since >= oldest_allowed
                    and now <= connection.expires_at
                    and transport is not None and not transport.is_closing()):
                return connection
            if transport is not None:
                transport.close()
        return None

    def _tls_for(self, target: URL) -> ssl.SSLContext:
        context = self._tls.find(target)
        if context is None:
            if self._system_tls is None:
                self._system_tls = ssl.create_default_context()
            context = self._system_tls
        return context

    async def _connect(self, key: tuple[str, int],
                       tls: ssl.SSLContext | None = None) -> _Connection:
        """A new connection to ``key``, TLS verified against ``tls`` if given, within the
        connect timeout: straight to an IP address, through ``_open_socket`` to a name."""
        loop = asyncio.get_running_loop()
        opened = self._opened
        host, port = key
        server_hostname = host if tls is not None else None
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                if _is_ip_address(host):
                    _, connection = await loop.create_connection(
                        opened, host, port, ssl=tls, server_hostname=server_hostname)
                else:
                    sock = await self._open_socket(host, port)
                    try:
                        _, connection = await loop.create_connection(
                            opened, sock=sock, ssl=tls, server_hostname=server_hostname)
                    except BaseException:
                        sock.close()     # a TLS handshake failed or timed out: not leaked
                        raise
        except TimeoutError:
            raise UpstreamConnectTimeout(
                f"no connection to {host_port(*key)} within {self.connect_timeout_s:g} s"
            ) from None
        except OSError as exc:
            if exc.errno in _LOCAL_ERRNOS or out_of_descriptors():
                raise UpstreamLocalError(f"cannot connect to {host_port(*key)}: {exc}") from exc
            raise UpstreamConnectError(f"cannot connect to {host_port(*key)}: {exc}") from exc
        connection.tls = tls
        if tls is not None and self._on_certificate is not None:
            not_after = _certificate_expiry(connection.transport)
            if not_after is not None:
                self._on_certificate(key, not_after)
        return connection

    def _opened(self) -> _Connection:
        """A new connection's protocol, its own age limit drawn (``AGE_JITTER``): at most
        ``max_age_s`` from now."""
        share = self._random.uniform(1.0 - AGE_JITTER, 1.0)
        return _Connection(self.high_water, self._clock() + self.max_age_s * min(share, 1.0))

    async def _open_socket(self, host: str, port: int) -> socket.socket:
        """A socket connected to one of the addresses ``host`` resolves to, raced (RFC
        8305): ``loop.create_connection`` alone tries them one after another within one
        timeout, so a first address that drops connection attempts left a worker that
        answers on its second down for good. A name that does not resolve is an
        ``UpstreamConnectError`` saying so; a failure to connect is the ``OSError`` that
        ``_connect`` sorts into the worker's or the router's own."""
        where = host_port(host, port)
        try:
            addresses = await self._resolve(host, port)
        except socket.gaierror as exc:
            # at the open-file limit a lookup may fail as an unknown name (uvloop's needs a
            # descriptor)
            if exc.errno in _LOCAL_LOOKUP_ERRORS or out_of_descriptors():
                raise UpstreamLocalError(f"cannot connect to {where}: {exc}") from exc
            raise UpstreamConnectError(
                f"cannot connect to {where}: {host} does not resolve: {exc.strerror or exc}"
            ) from exc
        if not addresses:
            raise UpstreamConnectError(
                f"cannot connect to {where}: {host} does not resolve: no address")
        try:
            return await aiohappyeyeballs.start_connection(
                addresses, happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY_S, interleave=1)
        except RuntimeError as exc:     # uvloop reports some socket failures so
            raise OSError(str(exc)) from exc

    def _release(self, key: tuple[str, int], connection: _Connection) -> None:
        """Pool a finished connection, or close it: the client closed, its origin no longer
        retained, the pool full, or the connection past its age limit, at most ``max_age_s``
        (the address its name resolved to then may not be the worker's any more)."""
        retained = self._retained
        now = self._clock()
        if self._closed or (retained is not None and key not in retained) or len(
                self._idle.get(key, ())) >= self.max_idle or now > connection.expires_at:
            if connection.transport is not None:
                connection.transport.close()
            return
        connections = self._idle.setdefault(key, [])
        connection.idle_since = now
        connections.append(connection)
        if now - self._swept_at >= self.keepalive_s / 4:
            self._sweep(now)
        if self._sweep_timer is None:       # and when no request comes any more
            self._sweep_timer = asyncio.get_running_loop().call_later(
                self.keepalive_s, self._on_sweep_timer)

    def _on_sweep_timer(self) -> None:
        self._sweep_timer = None
        if self._closed:
            return
        self._sweep(self._clock())
        if self._idle:
            self._sweep_timer = asyncio.get_running_loop().call_later(
                self.keepalive_s / 2, self._on_sweep_timer)

    def _sweep(self, now: float) -> None:
        """Close the idle connections past ``keepalive_s`` to every origin: those taken last
        in first out are found expired only under the newer ones, and an origin no request
        goes to any more kept its idle connections, and their file descriptors, for good."""
        self._swept_at = now
        for key in list(self._idle):
            connections = self._idle[key]
            _expire(connections, now - self.keepalive_s)
            if not connections:
                del self._idle[key]


def _expire(connections: list[_Connection], oldest_allowed: float) -> None:
    """Close and drop the connections idle since before ``oldest_allowed``: the leading
    ones, the list being in the order they were released."""
    expired = 0
    for connection in connections:
        if connection.idle_since >= oldest_allowed:
            break
        expired += 1
        if connection.transport is not None:
            connection.transport.close()
    if expired:
        del connections[:expired]


async def _getaddrinfo(host: str, port: int) -> Sequence[AddrInfoType]:
    """``host``'s TCP addresses for ``port`` as the system resolves them, in its order."""
    return await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)


@functools.lru_cache(maxsize=1024)
def _is_ip_address(host: str) -> bool:
    """Whether ``host`` is an IPv4 or IPv6 address (yarl gives the latter without
    brackets), not a name to resolve: looked at on each new connection, so remembered."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _certificate_expiry(transport: asyncio.Transport | None) -> float | None:
    """The verified peer certificate's ``notAfter`` as Unix seconds, if there is one."""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    certificate = ssl_object.getpeercert() if ssl_object is not None else None
    not_after = certificate.get("notAfter") if certificate else None
    return float(ssl.cert_time_to_seconds(not_after)) if isinstance(not_after, str) else None


def origin_of(url: str | URL) -> Origin:
    """The (host, port) a request to ``url`` connects to: its pool of connections."""
    target = url if isinstance(url, URL) else URL(url)
    return (target.host or "", target.port or 80)


def base_url(url: str | URL) -> BaseUrl:
    """A worker's URL as the key of its credential and TLS context: scheme and host in lower
    case, the port always written, the path prefix without its trailing slash (``http://h``
    and ``http://H:80/`` are one worker's URL; ``http://h/a`` and ``http://h/b`` are two)."""
    target = url if isinstance(url, URL) else URL(url)
    return (f"{target.scheme.lower()}://{host_port(target.host or '', target.port or 80)}"
            f"{target.path.rstrip('/')}")


def host_port(host: str, port: int) -> str:
    """``host:port`` as a URL or a message writes it: an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _ByBase(Generic[_V]):
    """Values keyed by workers' base URLs, found for a request's URL by the longest base URL
    it is under (the same scheme, host and port, and a path at or below the base's)."""

    __slots__ = ("_at",)

    def __init__(self, values: Mapping[BaseUrl, _V]) -> None:
        self._at: dict[tuple[str, str, int], list[tuple[str, _V]]] = {}
        for base, value in values.items():
            parsed = URL(base)
            where = (parsed.scheme.lower(), parsed.host or "", parsed.port or 80)
            self._at.setdefault(where, []).append((parsed.path.rstrip("/"), value))
        for entries in self._at.values():       # the longest prefix is tried first
            entries.sort(key=lambda entry: len(entry[0]), reverse=True)

    def find(self, target: URL) -> _V | None:
        entries = self._at.get((target.scheme, target.host or "", target.port or 80))
        if entries:
            path = target.path
            for prefix, value in entries:
                if not prefix or path == prefix or path.startswith(prefix + "/"):
                    return value
        return None

    def at_origin(self, origin: Origin) -> list[_V]:
        """Every value at ``origin``, whichever its scheme."""
        return [value for (_, host, port), entries in self._at.items()
                if (host, port) == origin for _, value in entries]


def _with_authorization(headers: Mapping[str, str], value: str) -> dict[str, str]:
    kept = {name: v for name, v in headers.items() if name.lower() != "authorization"}
    kept["Authorization"] = value
    return kept


def encode_request(url: URL, body: bytes | None, headers: Mapping[str, str],
                   method: str = "POST") -> bytes:
    """The request's bytes: the request line, ``Host``, the given headers (less the
    hop-by-hop and framing ones this client sets itself), ``Content-Length`` when there is a
    body, the body."""
    target = url.raw_path_qs or "/"
    host = url.raw_host or ""
    if ":" in host:
        host = f"[{host}]"          # an IPv6 literal
    if url.port is not None and not url.is_default_port():
        host = f"{host}:{url.port}"
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers.items():
        lowered = name.lower()
        if lowered in ("host", "content-length", "transfer-encoding", "connection"):
            continue
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"header {name!r} contains a line break")
        lines.append(f"{name}: {value}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    # surrogateescape: a header's bytes that are not UTF-8 (aiohttp decoded them with it) go
    # out as they came in
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape") + (body or b"")
