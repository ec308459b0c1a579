"""Process settings of one router replica: a frozen dataclass, built from the CLI or tests.

Defaults and why:

* ``scrape_interval_s = 0.2``: vLLM updates its gauges once per engine step (tens of ms), so
  polling faster buys little, while the router's in-flight accounting already covers the
  gap between polls (``workers.inflight``). Five scrapes a second per worker keeps the
  worker's cost of rendering ``/metrics`` negligible and bounds snapshot age at ~200 ms.
* ``models_interval_s = 5.0``: ``/v1/models`` (served names, ``max_model_len``, LoRA cards)
  changes only on restarts or adapter loads.
* ``fail_threshold = 3``: three consecutive failed scrapes (~0.6 s: refused, HTTP error,
  garbage) mark a worker down; one success brings it back.
* ``slow_grace_s = 10``: scrapes that only time out (a worker too busy to answer
  ``/metrics`` quickly) keep the worker up, its numbers growing stale, for this long after
  its last good scrape; marking busy workers down would pile their load onto the others.
* ``upstream_timeout_s = 300``: longest wait for a worker's response headers and between two
  stream chunks before answering 504. Non-streamed generations answer only when done.
* ``max_retries = 2``: a connect error or a 5xx before the first byte is retried on another
  worker at most twice (three workers tried in all).
* ``eject_after = 5``, ``eject_for_s = 10``: five requests in a row failing on a worker
  (connect error, dropped connection, 5xx before the answer began, timeout) set it aside for
  10 s, twice as long each time it fails again on coming back, up to 5 minutes
  (``router.ejection``); 0 never ejects. Five keeps a burst of one-off failures from ejecting
  a worker that scrapes fine; 10 s is long enough to spare clients a retry each, short
  enough to find a recovered worker soon.
* ``stall_after_s = 120``: a request still without its first byte this long after it was
  sent, and ten times longer than the policy estimated, sets its worker aside until it
  settles (``router.stalls``): a hung engine is found in two minutes, not after five
  upstream timeouts of 300 s each. Two minutes, because a fleet slower than its declared
  GPUs (vLLM on CPUs declared as an L40S) runs far behind the estimates and must not look
  hung; and an engine whose generated tokens rose within the last two minutes is busy, not
  hung (its attempts are watched on); 0 never watches.
* ``max_body_bytes = 32 MiB``: larger bodies get 413 before they are read whole.
* ``max_body_values = 2,000,000``: a body of 1 MiB or more holding more JSON values gets
  413 before it is parsed (``router.body_values``): parsed, each is an object in the
  router's memory.
* ``body_timeout_s = 60``: a request body of which nothing arrives for this long gets 408: a
  client that stops sending mid-body (a stalled upload, or one holding connections open on
  purpose) would otherwise hold its connection, and a drain, forever. A slow upload that
  keeps sending is not cut.
* ``client_idle_timeout_s = 75``: a client connection idle between requests this long is
  closed (nginx's default; aiohttp's is an hour, and idle connections piled up toward the
  open-file limit).
* ``drain_delay_s = 0``: on SIGTERM the router stops listening at once. With a delay it goes
  on listening and serving that long first while ``/health`` (``/readiness``) answers 503
  ``stopping``: a load balancer that learns of a leaving backend only from its health
  checks, and does not retry a refused connection, stops sending before the port closes.
* ``send_timeout_s = 60``: a write to a streaming client that cannot go on this long (its
  socket's and the router's buffers full, their backlog not drained: the client reads
  nothing, or far slower than the stream comes) closes its connection, which ends the
  request as one whose client left (nginx's ``send_timeout``).
  Without it a client that never reads held its in-flight slot and its worker's request.
* ``tenant_labels = 100``: tenants (``x-tenant``, or a digest of the API key) given a
  ``tenant`` series of their own in ``kvroute_cost_dollars_total``, the first seen first;
  later ones count as ``(other)``. Clients choose tenants, and every label value is a series
  kept for the life of the process: the bound keeps memory and scrapes bounded.
* ``response_ttl_s = 7 days``: with Redis, how long the owner of each Responses API response
  is kept there (``<redis_key_prefix>response:<id>``, about 180 bytes a key): Redis holds one
  key for every response kept by a worker in that time, so a fleet making many responses a
  second sets it to how long its conversations are continued.
* ``redis_key_prefix = "kvroute:"``: begins the name of every key the replicas share in
  Redis. Two deployments on one Redis database (many managed offerings give DB 0 only) merge
  their budgets, in-flight counts, routing history and response owners unless each has its
  own.
* ``api_keys = ()``: no key is asked of clients. Given keys, ``/v1/…``, vLLM's pooling
  APIs (``/score``, ``/rerank``, ``/v2/rerank``, ``/pooling``, ``/classify``),
  ``/tokenize``, ``/detokenize`` and ``/debug/…`` answer 401 to a client without one of them
  (``router.client_auth``); the CLI reads them from ``--api-key`` or ``KVROUTE_API_KEY``.
  ``api_keys_file``: more keys, each named by its tenant (a YAML file, read again when it
  changes, every ``reload_interval_s``).
* ``drain_timeout_s = 60``: on SIGTERM or SIGINT the router stops listening at once (new
  connections are refused, so a load balancer moves on) and lets the requests in flight
  finish for up to this long; what is still running then is cut (its worker connection
  closed, so vLLM aborts it). A minute lets most generations end; a stream longer than
  that is cut.
* ``gc_interval_s = 0.01``: the cyclic garbage collector's due collections run from an
  event-loop task this often, between callbacks, instead of inside whichever request's
  decision allocates past CPython's young threshold (``router.collector``); 0 leaves them to
  CPython. At ten milliseconds a closed loop of some 600–1,300 requests a second saw a third
  to a half fewer young collections than CPython's, each larger, for about the same time in
  all (docs/benchmarks.md, "Collections between requests"); an idle router's tick backs off
  to a second.
* ``ssl_certfile = ssl_keyfile = None``: the router listens in plain HTTP. Given a
  certificate (and its key, unless the certificate file holds it), it serves HTTPS only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from router.body_values import MAX_BODY_VALUES
from router.label_values import DEFAULT_TENANT_LABELS

# nginx's send_timeout: the longest one write to a streaming client may wait for it to read
DEFAULT_SEND_TIMEOUT_S = 60.0

# what a client can send in an HTTP header: visible ASCII, no spaces
_SENDABLE_KEY_CHARS = frozenset(chr(c) for c in range(0x21, 0x7f))
_KEY_PATTERN_CHARS = frozenset("*?[]\\")     # glob characters of Redis's key patterns


def api_key_problem(key: object) -> str | None:
    """Why ``key`` cannot be a client's API key, or None. A key with a space or a character
    outside ASCII was accepted and could never be sent: the clients (``openai``, ``httpx``,
    curl's header) refuse such a header value or cut it at the space."""
    if not isinstance(key, str) or not key:
        return "must be a non-empty string"
    if not _SENDABLE_KEY_CHARS.issuperset(key):
        return ("must be visible ASCII characters without spaces (clients send it in an "
                "HTTP header)")
    return None

# how long Redis keeps the owner of a Responses API response: a kept response is not expected
# to outlive a week of its server's memory
DEFAULT_RESPONSE_TTL_S = 7 * 24 * 3600

# what begins the name of every key a router writes to Redis
DEFAULT_REDIS_KEY_PREFIX = "kvroute:"
MAX_REDIS_KEY_PREFIX = 64


def redis_key_prefix_problem(prefix: object) -> str | None:
    """Why ``prefix`` cannot begin the router's Redis keys, or None: it must be visible ASCII
    without spaces (a space or a control character, typed or pasted by mistake, would make a
    deployment's keys hard to name in ``redis-cli`` and its log lines) nor the characters of
    Redis's key patterns (an ACL ``~PREFIX*`` naming them would match other keys), of at most
    ``MAX_REDIS_KEY_PREFIX`` characters (it is in every key: Responses API owners alone are
    one key each)."""
    if not isinstance(prefix, str):
        return f"must be a string, got {type(prefix).__name__}"
    if not prefix:
        return "must not be empty (the default is 'kvroute:')"
    if not _SENDABLE_KEY_CHARS.issuperset(prefix):
        return f"must be visible ASCII characters without spaces, got {prefix!r}"
    if not _KEY_PATTERN_CHARS.isdisjoint(prefix):
        return ("must not hold any of * ? [ ] \\ (the glob characters of Redis's key "
                f"patterns, as an ACL's ~PREFIX* reads them), got {prefix!r}")
    if len(prefix) > MAX_REDIS_KEY_PREFIX:
        return f"must be at most {MAX_REDIS_KEY_PREFIX} characters, got {len(prefix)}"
    return None


# an origin as a browser writes it in its ``Origin`` header: scheme://host[:port], in lower
# case, with no path (a host name, a dotted address, or an IPv6 address in brackets)
_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://(?:\[[0-9a-f:.]+\]|[a-z0-9._~-]+)(?::(\d{1,5}))?")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_problem(origin: str) -> str | None:
    """Why ``origin``, an entry of ``--allowed-origins``, can never match the ``Origin`` a
    browser sends, or None: it must be ``*`` (any), or ``scheme://host[:port]`` as browsers
    write it (lower case, no path, no default port). ``null`` is taken as well: what a page
    of no origin sends (a ``file://`` page, a sandboxed frame), which Starlette's list
    matches too. Such an entry was taken and allowed nothing (``foo``, or ``a.example``, for
    which a browser sends ``https://a.example``)."""
    if origin in ("*", "null"):
        return None
    shown = origin.rstrip("/")
    matched = _ORIGIN.fullmatch(shown.lower())
    if matched is None:
        return (f"{origin!r} is not an origin: give '*' or scheme://host[:port] as a browser "
                "sends it in its Origin header, with no path (https://chat.example.com, "
                "http://localhost:3000)")
    scheme = shown.partition("://")[0].lower()
    port = matched.group(1)
    written = shown.lower()
    if port is not None and not 1 <= int(port) <= 65535:
        return f"{origin!r}: the port must be within 1..65535"
    if port is not None and _DEFAULT_PORTS.get(scheme) == int(port):
        written = written.removesuffix(f":{port}")
    elif port is not None:          # a browser writes the number alone: :8080, not :08080
        written = written.removesuffix(f":{port}") + f":{int(port)}"
    if written != origin:
        return (f"{origin!r} never matches: a browser sends this origin as {written!r} (in "
                "lower case, without a trailing slash, its scheme's default port or a port's "
                "leading zeros)")
    return None


@dataclass(frozen=True, slots=True)
class Settings:
    fleet_path: Path
    routing_path: Path
    host: str = "127.0.0.1"
    port: int = 8000
    scrape_interval_s: float = 0.2
    scrape_timeout_s: float = 1.0
    models_interval_s: float = 5.0
    fail_threshold: int = 3
    slow_grace_s: float = 10.0
    connect_timeout_s: float = 2.0
    upstream_timeout_s: float = 300.0
    max_retries: int = 2
    eject_after: int = 5
    eject_for_s: float = 10.0
    stall_after_s: float = 120.0
    max_body_bytes: int = 32 * 1024 * 1024
    max_body_values: int = MAX_BODY_VALUES
    body_timeout_s: float = 60.0
    client_idle_timeout_s: float = 75.0
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S
    decisions_ring_size: int = 256
    tenant_labels: int = DEFAULT_TENANT_LABELS
    request_id_header: str = "x-request-id"
    reload_interval_s: float = 1.0
    redis_url: str | None = None
    # begins every key's name in Redis: deployments sharing a database, each its own
    redis_key_prefix: str = DEFAULT_REDIS_KEY_PREFIX
    replica_id: str = "router-0"
    response_ttl_s: float = DEFAULT_RESPONSE_TTL_S
    api_keys: tuple[str, ...] = field(default=(), repr=False)    # never printed
    api_keys_file: Path | None = None
    drain_timeout_s: float = 60.0
    drain_delay_s: float = 0.0
    gc_interval_s: float = 0.01
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    # a port of this process's own (every endpoint; its /metrics are this process's alone),
    # besides the port it shares with the other processes of `serve --processes N`
    process_port: int | None = None
    # listen with SO_REUSEPORT, which the processes of `serve --processes N` share the port
    # by; off, a port another process listens on is refused (`ListenError`)
    share_port: bool = False
    # origins whose web pages may call the router ("*": any, as vLLM's default; empty: no
    # cross-origin headers, OPTIONS a 405)
    allowed_origins: tuple[str, ...] = ("*",)

    def __post_init__(self) -> None:
        for name in ("scrape_interval_s", "upstream_timeout_s", "eject_for_s", "stall_after_s",
                     "response_ttl_s", "drain_timeout_s", "drain_delay_s", "gc_interval_s",
                     "body_timeout_s", "client_idle_timeout_s", "send_timeout_s"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name}: must be a finite number of seconds")
        if not 0 <= self.port <= 65535:
            raise ValueError("port: must be within 0..65535 (0: any free port)")
        if self.scrape_interval_s <= 0:
            raise ValueError("scrape_interval_s: must be positive")
        if self.upstream_timeout_s <= 0:
            raise ValueError("upstream_timeout_s: must be positive")
        if self.body_timeout_s <= 0:
            raise ValueError("body_timeout_s: must be positive")
        if self.client_idle_timeout_s <= 0:
            raise ValueError("client_idle_timeout_s: must be positive")
        if self.send_timeout_s <= 0:
            raise ValueError("send_timeout_s: must be positive")
        if self.max_retries < 0:
            raise ValueError("max_retries: must be >= 0")
        if self.eject_after < 0:
            raise ValueError("eject_after: must be >= 0 (0: never eject)")
        if self.eject_for_s <= 0:
            raise ValueError("eject_for_s: must be positive")
        if self.stall_after_s < 0:
            raise ValueError("stall_after_s: must be >= 0 (0: never)")
        if self.max_body_bytes <= 0:
            raise ValueError("max_body_bytes: must be positive")
        if self.max_body_values <= 0:
            raise ValueError("max_body_values: must be positive")
        if self.decisions_ring_size <= 0:
            raise ValueError("decisions_ring_size: must be positive")
        if self.tenant_labels < 0:
            raise ValueError("tenant_labels: must be >= 0")
        if self.response_ttl_s < 1:
            raise ValueError("response_ttl_s: must be at least 1 second")
        if self.redis_url is not None:
            _check_redis_url(self.redis_url)
        problem = redis_key_prefix_problem(self.redis_key_prefix)
        if problem is not None:
            raise ValueError(f"redis_key_prefix: {problem}")
        for key in self.api_keys:
            if api_key_problem(key) is not None:
                raise ValueError(f"api_keys: every API key {api_key_problem(key)}")
        if self.drain_timeout_s < 0:
            raise ValueError("drain_timeout_s: must be >= 0 (0: cut at once)")
        if self.drain_delay_s < 0:
            raise ValueError("drain_delay_s: must be >= 0 (0: stop listening at once)")
        if self.gc_interval_s < 0:
            raise ValueError("gc_interval_s: must be >= 0 (0: collections as CPython runs them)")
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ValueError("ssl_keyfile: needs ssl_certfile, the certificate it belongs to")
        if self.process_port is not None and not 1 <= self.process_port <= 65535:
            raise ValueError("process_port: must be within 1..65535")
        for origin in self.allowed_origins:
            problem = origin_problem(origin)
            if problem is not None:
                raise ValueError(f"allowed_origins: {problem}")

    @property
    def scheme(self) -> str:
        """How clients reach the router: ``https`` with a certificate, else ``http``."""
        return "http" if self.ssl_certfile is None else "https"


_ENCODE_PASSWORD = ("redis_url: cannot be parsed as redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] "
                    "(a password holding '/', '#', '?' or '@' must be percent-encoded: "
                    "%2F, %23, %3F, %40)")


def _check_redis_url(url: str) -> None:
    """ValueError naming ``--redis-url`` (never its password) when redis-py cannot parse it,
    or parses it otherwise than it reads (an '@' outside the user part)."""
    from redis.connection import parse_url  # only where a URL is given

    scheme, _, rest = url.partition("://")
    try:
        parsed = parse_url(url)
    except ValueError as exc:
        if "@" in rest:        # the message may quote a piece of the password
            raise ValueError(_ENCODE_PASSWORD) from None
        raise ValueError(f"redis_url: {exc}") from None
    if "@" in rest and _at_outside_userinfo(url):
        raise ValueError(_ENCODE_PASSWORD)
    database = rest.split("?", 1)[0].partition("/")[2].strip("/ ")
    if scheme in ("redis", "rediss") and database and "db" not in parsed:
        shown = "" if "@" in rest else f", got {database!r}"     # (never a password's piece)
        raise ValueError("redis_url: the database after the host must be a number "
                         f"(redis://host:port/N){shown}")


def _at_outside_userinfo(url: str) -> bool:
    """Whether an '@' of ``url`` is not where a parser takes the user and password from: a
    password holding '#', '?' or '/' ends the host part there, and the rest (the real host
    too) is read as the fragment, query or path. ``redis://:42200#PW@10.9.9.9:6379``
    connected to an unauthenticated localhost:42200, and was logged whole. An '@' within a
    query's value (``?password=a@b``) is where it belongs."""
    parts = urlsplit(url)
    if "@" in parts.fragment:
        return True
    if any("@" in item.partition("=")[0] for item in parts.query.split("&")):
        return True             # not in a value: a piece of the user part after a '?'
    if parts.scheme == "unix":  # (its path may hold an '@'; it has no host)
        return False
    return "@" in parts.path or not parts.hostname
