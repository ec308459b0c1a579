"""A ``StateStore`` shared by several router replicas through Redis.

Every key named below is under the deployment's key prefix (``--redis-key-prefix``;
``RedisKeys``), ``kvroute:`` by default, as written here: ``kvroute:inflight:<replica>`` is
``<prefix>inflight:<replica>``. Deployments sharing one Redis database under prefixes of
their own share nothing (under one prefix, they merged their budgets, in-flight counts,
routing history and response owners).

Each replica keeps exact counts of its own dispatches in a local ``InflightTracker``, and of
its tenants' budgets in a local ``TenantUsage``. Off the request path every
``sync_interval_s`` it publishes them, in one transaction, to the hashes
``kvroute:inflight:<replica>`` (field per worker: ``requests,prefill,decode,since_scrape``)
and ``kvroute:usage:<replica>`` (field per budget: ``requests,tokens`` over the last minute,
and ``<budget>\x1fschedule``: what of them stays 10, 20, … 50 s later, so that the others'
``Retry-After`` says when it leaves), the in-flight counts with a time-to-live (``ttl_s``,
and at least ``TTL_SYNCS`` times the last sync's duration: a slow Redis must not let them
lapse between two publishes), the usage with the window's (``WINDOW_S``), and marks itself
alive in the sorted set ``kvroute:replicas`` (with when it published); then it reads the
other live replicas' hashes. Views add the others' counts to the local ones, so a burst
spread over replicas is still seen whole, and a budget is judged on every replica's
spending. A replica that dies stops refreshing its hashes: its in-flight counts expire
within ``ttl_s``, and its usage is read as of how long ago it published (what its schedule
says is still in the window), leaving with the window. A replica paused for seconds (SIGSTOP,
a VM pause, a long GC) is read so too, so its spending stays counted while it is away and
a tenant does not get it again (when its usage expired with its in-flight counts, a
replica paused 3 s came back to a deployment holding twice the limit). A process started
under a dead one's id leaves the dead one's usage as a stopped replica's (below) at its first
publish, rather than replacing it. One that stops removes its in-flight counts,
but what its budgets spent stays counted until it leaves the window: it is written to
``kvroute:usage-left:<replica>:<process>``, listed with the time it ends in the sorted set
``kvroute:usage-left``, and read by every replica from the schedule written with it, as a
silent replica's is, until it leaves the window (``WINDOW_S``). Otherwise a rolling restart
gave each tenant back every restarted replica's share of the last minute.
(The replicas are found through sorted sets, not by scanning the keyspace, whose Responses
API owners can number millions.) Every time written to or compared in Redis (when a replica
last published, when a stopped one's spending leaves the window) is on Redis's clock
(``TIME``, read with each sync; ``RedisClock``), not the hosts', which may disagree: a host
whose wall clock is off Redis's by more than ``SKEW_REPORTED_S`` is logged, once.

Responses API owners (``response id -> worker``) are recorded in a local ``ResponseOwners``
map at once and written to ``kvroute:response:<id>`` (the tenant whose key made it, if any,
to ``kvroute:response-tenant:<id>``, which replicas of the release before do not read;
time-to-live ``response_ttl_s``, a
week by default, less the time the write waited) by a background task, never awaited by the
request: a slow Redis does not slow the creation of responses. Owners not yet written (Redis
slow or unreachable; at most ``MAX_UNSAVED_OWNERS``, the oldest dropped past that) are written
when it answers again, so a follow-up reaching another replica after an outage still finds
its worker. Owners are read from the local map first, then Redis: that read is the one Redis
round trip on a request path, for follow-ups only. While the store is set aside, Redis is
read only when it refused writes for a reason that leaves reads working (full at
``noeviction``, a read-only replica, a failed save), not when it does not answer.

What each replica routed where is shared too, for the ``prefix`` scorer's routing history
(without KV events, the only knowledge of the workers' caches): each routed prompt's block
hashes (``on_routed_blocks``) are appended at once, by a background task, to the stream
``kvroute:routed`` (trimmed to about ``ROUTED_STREAM_MAXLEN`` entries; at most
``MAX_ROUTED_PENDING`` wait while Redis is away, the oldest dropped), and a reader task
waits on the stream (``XREAD BLOCK``) for the entries the other replicas append and hands
them to ``follow_routed``'s callback within milliseconds: a conversation whose turns a load
balancer spreads over the replicas stays on the worker holding it, even when the next turn
follows the answer at once. A replica starting reads the last ``REPLAY_WINDOW_MS`` of the
stream (what the others routed before it started, as far as the stream keeps it: a replica
restarted or added knows the caches of the conversations under way), learning it in slices
that yield to the event loop, and keeps its place while Redis is away (the routes the others
send when it returns are learnt, whoever syncs first; a stream that now ends before that
place, a Redis replaced, is read again from its last stretch). A Redis
refusing only the stream's commands (a user without ``XADD``, the key of another type)
leaves the routes unshared, logged once per kind of refusal while it lasts (without the
command's arguments, which hold prompt hashes), each side (publishing, reading) tried again
every ``ROUTES_RETRY_S``, and the store not degraded.

Redis is never awaited inside a decision. When it is unreachable (or refuses the commands:
a wrong password, out of memory) the store says so (``degraded``; ``/health`` and
``kvroute_state_store_degraded`` show it), drops the remote counts and routes on local ones,
retrying every interval (the log says when it goes, when the cause changes meanwhile, and
when it returns). A Redis answering as a replica (READONLY to a write, or a blocked read cut
as its primary turned replica: a failover whose new primary took over the address, DNS or a
virtual IP, while the pool's connections still reach the old one) has the pool's idle
connections closed, and those in use closed as their commands end (never under them: a
command redis-py sees cut is not sent again), so the next command connects through the
address to the primary it names now (redis-py keeps a connection after a READONLY reply like
any other). Such reconnects are spaced ``RECONNECT_MIN_S`` apart at least, the gap doubling
up to ``RECONNECT_MAX_S`` while the address keeps answering as a replica and starting over once
a write works; after ``REPLICA_RECONNECTS_LOGGED`` in a row the log says, once, that the
address answers as a read-only replica (``--redis-url`` naming a replica for good reopened
its connections at every sync, ten times a second). ``replicas`` is
how many replicas share their counts through it,
this one included (1 when alone or degraded; a replica counts while it published within
``REPLICA_ALIVE_MS``): replicas that disagree on it are not all on the same Redis database
and key prefix.
Two processes publishing under one replica id overwrite each other's counts: each marks
``kvroute:replica-instance:<id>`` with its own random token, and one that finds another's
mark two syncs running logs a warning (once).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import itertools
import logging
import math
import re
import secrets
import sys
import time
from array import array
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import redis.asyncio as redis
from redis import exceptions as redis_exceptions
from redis.exceptions import (
    AuthenticationError,
    ReadOnlyError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from router.admission.usage import (
    SCHEDULE_STEP_S,
    SCHEDULE_STEPS,
    WINDOW_S,
    Schedule,
    TenantUsage,
)
from router.settings import (
    DEFAULT_REDIS_KEY_PREFIX,
    DEFAULT_RESPONSE_TTL_S,
    redis_key_prefix_problem,
)
from router.state.redis_clock import RedisClock
from router.state.response_owners import ResponseOwners, ResponseRecord
from workers.inflight import InflightTracker, WorkerInflight
from workers.task_cancel import cancel_and_wait

log = logging.getLogger(__name__)

T = TypeVar("T")

# a budget key's published schedule field (``<key>\x1fschedule``: no tenant name holds a
# control character; an earlier replica skips the field, whose value it cannot read)
SCHEDULE_SUFFIX = "\x1fschedule"
WINDOW_MS = WINDOW_S * 1000
# a replica silent this long leaves the set (its hashes expired long before)
REPLICA_FORGET_MS = 600_000
# a replica that published within this long counts as sharing state (a killed one stops)
REPLICA_ALIVE_MS = 60_000
CLOSE_TIMEOUT_S = 2.0
MAX_UNSAVED_OWNERS = 100_000     # response owners waiting for Redis; the oldest dropped past it
SAVE_BATCH = 1_000               # owners written in one pipeline
ROUTED_STREAM_MAXLEN = 5_000     # entries the stream keeps (trimmed approximately)
MAX_ROUTED_PENDING = 2_000       # routed prompts waiting to be published
ROUTED_SEND_COUNT = 1_000        # entries appended in one pipeline at most
ROUTED_READ_COUNT = 200          # entries read (and learnt on the loop) at once at most
ROUTED_BLOCK_MS = 500            # a read waits this long for new entries
SOCKET_TIMEOUT_S = 1.0           # a command's reply waited this long at most
# on a slow Redis a read waits less, so that its wait and its round trip fit that timeout
# with this much to spare (not less than MIN_BLOCK_MS)
BLOCK_SPARE_MS = 300
MIN_BLOCK_MS = 50
ROUTES_RETRY_S = 10.0            # after Redis refused the stream's commands, the next try
READER_WAIT_S = 0.1              # the reader's pause while Redis is away (at most a sync's)
# a replica starting learns the routes of this last stretch the stream keeps (older ones tell
# of caches long since turned over, or of engines restarted since)
REPLAY_WINDOW_MS = 15 * 60 * 1000
LEARN_SLICE_S = 0.002            # routes learnt on the event loop between two yields to it
MAX_REFUSALS_LOGGED = 4          # kinds of refusal of the stream logged while it is refused
TTL_SYNCS = 4                    # counts outlive this many syncs as long as the last one
RECONNECT_MIN_S = 1.0            # after a reconnect to leave a replica, the next one at least
RECONNECT_MAX_S = 10.0           # the gap, doubled at each, grows to this
REPLICA_RECONNECTS_LOGGED = 4    # reconnects in a row still meeting a replica: logged (once)

LearnRouted = Callable[[str, Mapping[int, Sequence[int]]], None]


class RedisKeys:
    """The names of every key the store reads or writes, all under one deployment's prefix
    (``--redis-key-prefix``): deployments sharing a Redis database under other prefixes see
    nothing of each other's."""

    __slots__ = ("inflight", "instance", "left_usage", "left_usage_set", "prefix", "replicas",
                 "response", "response_tenant", "routed", "usage")

    def __init__(self, prefix: str = DEFAULT_REDIS_KEY_PREFIX) -> None:
        problem = redis_key_prefix_problem(prefix)
        if problem is not None:
            raise ValueError(f"redis_key_prefix: {problem}")
        self.prefix = prefix
        self.inflight = prefix + "inflight:"     # + replica id: hash of its in-flight counts
        self.usage = prefix + "usage:"           # + replica id: hash of its budgets' usage
        # sorted set: replica id -> when it last published (ms; on Redis's clock, as every
        # time the replicas write or compare in Redis: their hosts' clocks may disagree)
        self.replicas = prefix + "replicas"
        # what stopped replicas' budgets spent, until it leaves the window: sorted set of the
        # hashes' keys (``left_usage`` + replica + ":" + process) -> when each ends (ms)
        self.left_usage_set = prefix + "usage-left"
        self.left_usage = prefix + "usage-left:"
        self.instance = prefix + "replica-instance:"   # + replica id -> the process publishing
        self.response = prefix + "response:"     # + response id -> its worker
        self.response_tenant = prefix + "response-tenant:"   # the tenant whose key made it
        self.routed = prefix + "routed"   # stream: r (replica), w (worker), h (encoded hashes)


class MergedInflight:
    """Local counts plus the other replicas' last published counts (read by the registry)."""

    __slots__ = ("local", "remote")

    def __init__(self, local: InflightTracker) -> None:
        self.local = local
        self.remote: dict[str, WorkerInflight] = {}

    def get(self, worker_id: str) -> WorkerInflight:
        mine = self.local.get(worker_id)
        other = self.remote.get(worker_id)
        if other is None:
            return mine
        return WorkerInflight(
            requests=mine.requests + other.requests,
            prefill_tokens=mine.prefill_tokens + other.prefill_tokens,
            decode_tokens=mine.decode_tokens + other.decode_tokens,
            dispatched_since_scrape=mine.dispatched_since_scrape + other.dispatched_since_scrape)

    def on_scrape(self, worker_id: str) -> None:
        self.local.on_scrape(worker_id)


def _encode(entry: WorkerInflight) -> str:
    return (f"{entry.requests},{entry.prefill_tokens},{entry.decode_tokens},"
            f"{entry.dispatched_since_scrape}")


def _decode(raw: str) -> WorkerInflight:
    requests, prefill, decode, since = (int(x) for x in raw.split(","))
    return WorkerInflight(requests, prefill, decode, since)


_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def shown_url(url: str) -> str:
    """``url`` as it may be logged: all between ``://`` and the last ``@`` masked, unparsed
    (a password holding a '#' or '?' that a parser reads as the end of the host part, yarl's
    too, was logged whole), and a ``?password=`` query's value (redis-py takes one too)."""
    scheme, sep, rest = url.partition("://")
    if not sep:                # (not a URL settings take; masked all the same)
        scheme, rest = "", url
    _, at, after = rest.rpartition("@")
    shown = f"{scheme}{sep}***@{after}" if at else url
    return _QUERY_PASSWORD.sub(r"\1***", shown)


class RedisStateStore:
    """In-flight counters shared between replicas; see the module docstring."""

    def __init__(self, url: str, replica_id: str, sync_interval_s: float = 0.1,
                 ttl_s: float | None = None,
                 response_ttl_s: float = DEFAULT_RESPONSE_TTL_S,
                 wall_clock: Callable[[], float] = time.time,
                 key_prefix: str = DEFAULT_REDIS_KEY_PREFIX) -> None:
        """``wall_clock``: this host's clock, in seconds since the epoch; only compared with
        Redis's, to report a host out of time sync (what goes to Redis is timed on Redis's
        clock, see ``RedisClock``). ``key_prefix``: begins every key's name (``RedisKeys``)."""
        if response_ttl_s < 1:
            raise ValueError("response_ttl_s: must be at least 1 second")
        self._keys = RedisKeys(key_prefix)
        self._url = url
        self._clock = RedisClock(wall_clock)
        self._skew_logged = False
        self._shown = shown_url(url)       # for the log: never the password
        self._response_ttl_s = int(response_ttl_s)
        self.replica_id = replica_id
        self._key = self._keys.inflight + replica_id
        self._usage_key = self._keys.usage + replica_id
        self._interval = sync_interval_s
        self._ttl_ms = int(1000 * (ttl_s if ttl_s is not None else max(1.0, 10 * sync_interval_s)))
        self._local = InflightTracker()
        self._workers: set[str] = set()      # workers this replica has dispatched to
        self._merged = MergedInflight(self._local)
        self._usage = TenantUsage()
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._degraded = False
        self._degraded_cause = ""     # the kind of failure last logged
        self._still_reads = False     # set aside by a refused command: reads may still work
        self._owners = ResponseOwners()
        # response id -> (record, monotonic time recorded): owners not yet written to Redis
        self._unsaved: dict[str, tuple[ResponseRecord, float]] = {}
        self._saving: asyncio.Task[None] | None = None
        self._routed_out: deque[tuple[str, str]] = deque(maxlen=MAX_ROUTED_PENDING)
        self._learn: LearnRouted | None = None
        self._routed_from: str | None = None   # the last stream entry read (None: not placed)
        self._publishing: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._reader_failed = False        # logged once
        self._instance = secrets.token_hex(8)   # this process (replica ids may collide)
        self._shared_id_logged = False
        self._foreign_marks = 0
        self._published = 0
        self._learnt = 0
        self._errors = 0          # Redis commands that failed
        self._replicas = 1        # replicas sharing counts through Redis, this one included
        self.sync_seconds = 0.0   # the last sync's publish and read, round trips included
        # what Redis refused of the routed stream, by side (publish, read): the kinds of
        # refusal logged, until that side works again
        self._routes_refused: dict[str, set[str]] = {}
        # side -> monotonic time before which it is not tried again (after a refusal; each
        # side's own: a reader refused every retry kept the publisher from ever trying)
        self._routes_retry_at: dict[str, float] = {}
        self._replicas_logged: int | None = None
        self._first_published = False   # until then each publish looks for a killed predecessor
        # leaving a replica (READONLY): reconnects begun and ended (a command notes those
        # ended as it starts: one failing once another has begun since may have had its
        # connection closed under it, and is sent again), those since a write last worked,
        # when the last was (monotonic), the least time from it to the next, and whether the
        # address was logged as naming a replica
        self._reconnects_begun = 0
        self._reconnects_ended = 0
        self._replica_reconnects = 0
        self._reconnected_at = -math.inf
        self._reconnect_gap = RECONNECT_MIN_S
        self._replica_logged = False

    @property
    def inflight(self) -> MergedInflight:
        return self._merged

    @property
    def usage(self) -> TenantUsage:
        return self._usage

    @property
    def degraded(self) -> bool:
        return self._degraded

    @property
    def replicas(self) -> int:
        return self._replicas

    @property
    def errors(self) -> int:
        return self._errors

    @property
    def unsaved_owners(self) -> int:
        return len(self._unsaved)

    @property
    def routed_shared(self) -> tuple[int, int]:
        return self._published, self._learnt

    def on_routed_blocks(self, worker_id: str,
                         block_hashes: Mapping[int, Sequence[int]]) -> None:
        encoded = encode_blocks(block_hashes)
        if encoded:
            self._routed_out.append((worker_id, encoded))
            self._start_publishing()

    def follow_routed(self, learn: LearnRouted) -> None:
        self._learn = learn

    async def start(self) -> None:
        self._client = redis.Redis.from_url(self._url, decode_responses=True,
                                            socket_timeout=SOCKET_TIMEOUT_S,
                                            socket_connect_timeout=SOCKET_TIMEOUT_S)
        await self.sync_once()
        self._task = asyncio.create_task(self._run(), name="kvroute-redis-sync")
        self._reader = asyncio.create_task(self._follow_routed(), name="kvroute-redis-routed-in")

    async def close(self) -> None:
        """Stop syncing and remove this replica's counts; a Redis that does not answer
        within ``CLOSE_TIMEOUT_S`` is left to expire them (shutdown never waits on it)."""
        self._closing = True     # ends the sync loop even if a command swallows the cancel
        if self._task is not None:
            await cancel_and_wait(self._task)
        for task in (self._saving, self._publishing, self._reader):
            if task is not None:
                await cancel_and_wait(task)
        if self._client is not None:
            if not self._degraded:       # the owners recorded last, in the time allowed
                with contextlib.suppress(RedisError, OSError, TimeoutError):
                    await asyncio.wait_for(self._save_owners(), CLOSE_TIMEOUT_S)
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await asyncio.wait_for(self._withdraw(), CLOSE_TIMEOUT_S)
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await asyncio.wait_for(self._client.aclose(), CLOSE_TIMEOUT_S)

    def on_dispatch(self, worker_id: str, prefill_tokens: int, decode_tokens: int) -> None:
        self._workers.add(worker_id)
        self._local.on_dispatch(worker_id, prefill_tokens, decode_tokens)

    def on_first_token(self, worker_id: str, prefill_tokens: int) -> None:
        self._local.on_first_token(worker_id, prefill_tokens)

    def on_complete(self, worker_id: str, prefill_tokens_left: int, decode_tokens: int) -> None:
        self._local.on_complete(worker_id, prefill_tokens_left, decode_tokens)

    def forget_worker(self, worker_id: str) -> None:
        """Not published from now on (a scaled-down fleet's ids were published for ever);
        a dispatch to it adds it again; its in-flight entry goes once it serves nothing."""
        self._workers.discard(worker_id)
        self._local.forget(worker_id)

    def local_requests(self, worker_id: str) -> int:
        return self._local.get(worker_id).requests

    async def remember_response(self, response_id: str, worker_id: str,
                                tenant: str | None = None) -> None:
        """Recorded here at once; written to Redis in the background (never awaited)."""
        self._owners.remember(response_id, worker_id, tenant)
        unsaved = self._unsaved
        unsaved.pop(response_id, None)         # re-recorded: its place is at the end
        if len(unsaved) >= MAX_UNSAVED_OWNERS:
            del unsaved[next(iter(unsaved))]
        unsaved[response_id] = (ResponseRecord(worker_id, tenant), time.monotonic())
        self._start_saving()

    def _start_saving(self) -> None:
        """Write the unsaved owners, unless a write is under way or Redis is away (the sync
        loop starts it again when Redis answers)."""
        if self._degraded or self._closing or self._client is None:
            return
        if self._saving is None or self._saving.done():
            self._saving = asyncio.create_task(self._save_owners(),
                                               name="kvroute-redis-owners")

    async def _save_owners(self) -> None:
        """Write the unsaved owners, oldest first, with what is left of their time-to-live."""
        while self._unsaved and not self._degraded:
            batch = list(itertools.islice(self._unsaved.items(), SAVE_BATCH))
            try:
                await self._resent_if_cut(functools.partial(self._write_owners, batch))
            except (RedisError, OSError) as exc:
                await self._lost_redis(exc)
                return
            self._primary_answered()
            for response_id, entry in batch:
                if self._unsaved.get(response_id) is entry:
                    del self._unsaved[response_id]

    async def _write_owners(self, batch: list[tuple[str, tuple[ResponseRecord, float]]]
                            ) -> None:
        """Write ``batch`` of the unsaved owners, in one pipeline."""
        now = time.monotonic()
        async with self._client.pipeline(transaction=False) as pipe:
            for response_id, (record, recorded) in batch:
                left = int(self._response_ttl_s - (now - recorded))
                if left < 1:          # expired while it waited: not written
                    continue
                pipe.set(self._keys.response + response_id, record.worker, ex=left)
                if record.tenant is not None:    # a key of its own: older replicas
                    pipe.set(self._keys.response_tenant + response_id, record.tenant,
                             ex=left)            # read the owner as before
                # (no tenant is never written over one: an owner found by asking
                # the workers, while Redis was away, knows none)
            await pipe.execute()

    async def response_record(self, response_id: str) -> ResponseRecord | None:
        """The owner recorded here, else the one in Redis. Read from Redis while the store is
        set aside too when Redis answered with a refusal (a full Redis at ``noeviction``
        refuses the sync's writes, a replica its every write): it reads still. Not while it
        does not answer (each follow-up would wait for a connection)."""
        record = self._owners.record(response_id)
        if record is not None or (self._degraded and not self._still_reads):
            return record
        try:
            owner, tenant = await self._resent_if_cut(lambda: self._client.mget(
                self._keys.response + response_id, self._keys.response_tenant + response_id))
        except (RedisError, OSError) as exc:
            await self._lost_redis(exc)
            return None
        if isinstance(owner, str):
            tenant = tenant if isinstance(tenant, str) else None
            self._owners.remember(response_id, owner, tenant)
            return ResponseRecord(owner, tenant)
        return None

    async def response_owner(self, response_id: str) -> str | None:
        record = await self.response_record(response_id)
        return record.worker if record is not None else None

    async def _resent_if_cut(self, command: Callable[[], Awaitable[T]]) -> T:
        """``command()``'s result; sent a second time if its connection was closed under it
        by a reconnect of this store (``_reconnect``: one that took an idle connection just
        as the reconnect closed them), which is not Redis gone. Any other failure, or the
        second try's, is raised."""
        ended = self._reconnects_ended     # (any begun later, or under way, overlaps it)
        try:
            return await command()
        except (RedisError, OSError) as exc:
            if self._reconnects_begun == ended or not isinstance(
                    exc, (RedisConnectionError, ConnectionError)):
                raise
        return await command()

    async def _lost_redis(self, exc: Exception) -> None:
        """Redis failed a command of the sync: routing goes on on local state. Logged as it
        goes, and again when the cause changes (a server restarted with a password). A
        primary demoted by a failover (READONLY) has its connections closed (see
        ``_answered_as_replica``): the next command connects through the address again, to
        the primary it names now."""
        self._errors += 1
        failure = _failure(exc)
        cause = failure.split(" (", 1)[0]
        if not self._degraded:
            log.warning("redis %s %s: routing on local state", self._shown, failure)
        elif cause != self._degraded_cause:
            log.warning("redis %s still away, now %s", self._shown, failure)
        self._degraded_cause = cause
        self._degraded = True
        self._still_reads = _only_refused(exc)
        self._replicas = 1
        if _demoted(exc):
            await self._answered_as_replica()

    async def _answered_as_replica(self) -> None:
        """Redis answered as a replica (READONLY, a blocked read cut as it turned replica):
        reconnect through the address (``_reconnect``), unless the last reconnect is less
        than a gap ago. The gap starts at ``RECONNECT_MIN_S`` and doubles at each reconnect up
        to ``RECONNECT_MAX_S``, starting over once a write works (``_primary_answered``): an
        address naming a replica for good reopened the connections at every sync. After
        ``REPLICA_RECONNECTS_LOGGED`` reconnects in a row that is logged, once until a write
        works (a failover whose address takes that long to move may be logged so too)."""
        if (self._replica_reconnects >= REPLICA_RECONNECTS_LOGGED
                and not self._replica_logged):
            log.warning("redis %s still answers as a read-only replica after %d reconnects in "
                        "a row: unless a failover is under way, --redis-url should name the "
                        "primary (or an address that moves with it: a DNS name, a virtual IP, "
                        "a proxy); connecting again through it, up to %g s apart, meanwhile",
                        self._shown, self._replica_reconnects, RECONNECT_MAX_S)
            self._replica_logged = True
        now = time.monotonic()
        if now < self._reconnected_at + self._reconnect_gap:
            return
        if self._replica_reconnects:      # the first of a run waits the least gap after it
            self._reconnect_gap = min(2 * self._reconnect_gap, RECONNECT_MAX_S)
        self._reconnected_at = now
        self._replica_reconnects += 1
        await self._reconnect()

    def _primary_answered(self) -> None:
        """A write worked: the address names a primary; the next reconnect to leave a replica
        comes ``RECONNECT_MIN_S`` after the last one at least, as at first."""
        self._replica_reconnects = 0
        self._reconnect_gap = RECONNECT_MIN_S
        self._replica_logged = False

    async def _reconnect(self) -> None:
        """Close the pool's idle connections, and those in use as their commands end (they
        are not cut: redis-py does not send a cut command again, and it failed as if Redis
        were gone, setting the store aside): the next command opens one through the address
        again. A failover behind a stable address (DNS, a virtual IP, a proxy) moves only new
        connections to the promoted primary, and a READONLY answer is a reply like any other,
        after which redis-py keeps its connection: the pool stayed on the demoted primary
        (degraded for minutes, flapping as commands took connections opened before and after
        the move). A command that took an idle connection as it was being closed is sent
        again (``_resent_if_cut``)."""
        pool = self._client.connection_pool
        self._reconnects_begun += 1
        try:
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await asyncio.wait_for(pool.update_active_connections_for_reconnect(),
                                       CLOSE_TIMEOUT_S)
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await asyncio.wait_for(pool.disconnect(inuse_connections=False),
                                       CLOSE_TIMEOUT_S)
        finally:
            self._reconnects_ended += 1

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            if self._closing:
                return
            await self.sync_once()

    async def sync_once(self) -> None:
        """Publish this replica's counts and read everyone else's."""
        started = time.monotonic()
        try:
            others = await self._resent_if_cut(self._exchange)
            self.sync_seconds = time.monotonic() - started
        except (RedisError, OSError) as exc:
            await self._lost_redis(exc)
            self.inflight.remote = {}
            self._usage.remote = {}
            self._usage.remote_schedule = {}
            return
        self._primary_answered()
        others_named = f": {', '.join(sorted(others))}" if others else ""
        if self._degraded:
            # with the replicas sharing state now: they may have changed while it was away
            log.info("redis %s reachable again: sharing state with %d other replica(s)%s",
                     self._shown, len(others), others_named)
            self._replicas_logged = len(others) + 1
            # the reader keeps its place: the routes the others queued while Redis was away
            # are appended when it returns, and learnt whichever replica syncs first
            # (a failure: the reader's own read says what is wrong, and is tried again)
            with contextlib.suppress(RedisError, OSError):
                await self._resent_if_cut(self._keep_reader_place)
        self._degraded = False
        self._replicas = len(others) + 1
        if self._replicas != self._replicas_logged:      # at the first sync and on a change
            log.info("redis %s: %d other replica(s) share state with this one%s", self._shown,
                     len(others), others_named)
            self._replicas_logged = self._replicas
        if self._unsaved:
            self._start_saving()
        if self._routed_out:
            self._start_publishing()
        if self._routed_from is None and time.monotonic() >= self._routes_retry_at.get(
                "read", 0.0):
            try:
                await self._resent_if_cut(self._place_reader)
            except ResponseError as exc:
                if _demoted(exc):
                    await self._lost_redis(exc)
                else:
                    self._routes_failed(exc, "read")
            except (RedisError, OSError) as exc:
                await self._lost_redis(exc)

    async def _exchange(self) -> dict[str, float]:
        """Publish this replica's counts and take the others'; returns the other replicas
        alive (see ``_publish``)."""
        others, left = await self._publish()
        self.inflight.remote, self._usage.remote = await self._read(others, left)
        return others

    def _start_publishing(self) -> None:
        """Publish the routed prompts now, unless a publish is under way or Redis is away
        (the sync loop starts it again when Redis answers)."""
        if (self._degraded or self._closing or self._client is None
                or time.monotonic() < self._routes_retry_at.get("publish", 0.0)):
            return
        if self._publishing is None or self._publishing.done():
            self._publishing = asyncio.create_task(self._publish_routed(),
                                                   name="kvroute-redis-routed-out")

    async def _publish_routed(self) -> None:
        """Append the routed prompts to the stream, oldest first, in pipelines (a batch is
        taken off the queue before it is sent: what arrives meanwhile cannot push it out)."""
        while self._routed_out and not self._degraded:
            batch = [self._routed_out.popleft()
                     for _ in range(min(len(self._routed_out), ROUTED_SEND_COUNT))]
            try:
                await self._resent_if_cut(functools.partial(self._send_routes, batch))
            except (RedisError, OSError) as exc:
                if isinstance(exc, ResponseError) and not _demoted(exc):
                    self._routes_failed(exc, "publish")   # refused, the sync goes on: dropped
                    return
                # sent when Redis answers, before what was routed meanwhile; past the bound
                # the oldest go, as when routes arrive (``extendleft`` on a queue filled
                # meanwhile dropped the newest: the conversations under way)
                self._routed_out = deque(itertools.chain(batch, self._routed_out),
                                         maxlen=MAX_ROUTED_PENDING)
                await self._lost_redis(exc)
                return
            self._published += len(batch)
            self._primary_answered()
            self._routes_work("publish")

    async def _send_routes(self, batch: list[tuple[str, str]]) -> None:
        """Append ``batch`` (worker, encoded block hashes) to the stream, in one pipeline."""
        async with self._client.pipeline(transaction=False) as pipe:
            for worker_id, encoded in batch:
                pipe.xadd(self._keys.routed, {"r": self.replica_id, "i": self._instance,
                                              "w": worker_id, "h": encoded},
                          maxlen=ROUTED_STREAM_MAXLEN, approximate=True)
            await pipe.execute()

    def _routes_failed(self, exc: ResponseError, side: str) -> None:
        """Redis refused a command of the routed prompts' stream while the sync works (a
        user without XADD, ``kvroute:routed`` holding another type): the routes go unshared,
        logged once per kind of refusal while a side (``publish``, ``read``) is refused, and
        that side tried again every ``ROUTES_RETRY_S``; the counts, budgets and owners are
        shared as before, so the store is not degraded (it flipped between degraded and
        "reachable again" ten times a second, a log line each). A refusal's text varying
        between tries (the arguments it quotes, a number) is the same kind, and the two sides'
        refusals taking turns are not new each time (a disabled XADD was logged at every
        retry, 8 times in two minutes, each line quoting the batch's first prompt hash)."""
        self._errors += 1
        reason = _refusal(exc)
        kind = _refusal_kind(reason)
        logged = set().union(*self._routes_refused.values())
        refused = self._routes_refused.setdefault(side, set())
        if kind not in logged and len(logged) < MAX_REFUSALS_LOGGED:
            log.warning("redis %s refused the routed prompts' stream %s (%s): routes are not "
                        "shared with the other replicas; tried again every %g s", self._shown,
                        self._keys.routed, reason, ROUTES_RETRY_S)
        if len(refused) < MAX_REFUSALS_LOGGED:
            refused.add(kind)
        self._routes_retry_at[side] = time.monotonic() + ROUTES_RETRY_S

    def _routes_work(self, side: str) -> None:
        """A command of ``side`` (``publish``, ``read``) worked: its refusals are over, and
        once neither side's is left, that is logged."""
        if self._routes_refused.pop(side, None) is not None and not self._routes_refused:
            log.info("redis %s: routed prompts shared again", self._shown)

    async def _follow_routed(self) -> None:
        """Read what the other replicas route as they append it (a blocking read: learnt
        within milliseconds, before the next turn of a conversation arrives). While Redis is
        away it looks again every ``READER_WAIT_S`` (or sync interval, if shorter): a
        reader waiting a whole sync interval of seconds, its place kept, would learn the
        routes sent as Redis returns that much later."""
        pause = min(self._interval, READER_WAIT_S)
        while not self._closing:
            if self._degraded or self._routed_from is None:
                await asyncio.sleep(pause)
                continue
            try:
                reply = await self._client.xread({self._keys.routed: self._routed_from},
                                                 count=ROUTED_READ_COUNT,
                                                 block=self._read_block_ms())
            except ResponseError as exc:     # refused (no permission, a key of another type)
                if _demoted(exc):     # unblocked as its primary became a replica
                    await self._answered_as_replica()
                    await asyncio.sleep(pause)
                    continue
                self._routes_failed(exc, "read")
                await asyncio.sleep(ROUTES_RETRY_S)
                continue
            except (RedisError, OSError):
                # a read cut by a slow Redis: the sync loop judges whether it is away
                await asyncio.sleep(pause)
                continue
            self._routes_work("read")
            try:
                await self._learn_sliced(_stream_entries(reply))
            except Exception:          # a reply of another shape: the reader must not die
                if not self._reader_failed:
                    log.exception("reading the routes of the other replicas failed")
                self._reader_failed = True
                await asyncio.sleep(self._interval)

    def _read_block_ms(self) -> int:
        """How long a read of the routes waits for new ones: ``ROUTED_BLOCK_MS``, less on a
        slow Redis, so that the wait and a round trip (the last sync's time, which holds
        one or more) end within the socket timeout. A read cut by that timeout drops its
        connection: on a Redis half a second away every idle read did, and each sync
        after it connected again (2.5 s a sync instead of 0.5)."""
        spare_ms = int(1000 * (SOCKET_TIMEOUT_S - self.sync_seconds)) - BLOCK_SPARE_MS
        return max(MIN_BLOCK_MS, min(ROUTED_BLOCK_MS, spare_ms))

    async def _learn_sliced(self, entries: list[tuple[str, dict[str, str]]]) -> None:
        """Learn each entry's route, yielding to the event loop every ``LEARN_SLICE_S``: a
        replica catching up learns thousands of routes of long prompts (200 of 2,048 blocks
        each held the loop 0.4 s), while it serves."""
        started = time.perf_counter()
        for entry_id, fields in entries:
            self._learn_entry(entry_id, fields)
            if time.perf_counter() - started > LEARN_SLICE_S:
                await asyncio.sleep(0)
                started = time.perf_counter()

    def _learn_entry(self, entry_id: str, fields: dict[str, str]) -> None:
        self._routed_from = entry_id
        if fields.get("i") == self._instance or self._learn is None:
            return
        try:
            blocks = decode_blocks(fields["h"])
            worker_id = fields["w"]
        except (KeyError, ValueError):
            return              # not an entry of this format: nothing to learn
        self._learnt += 1
        try:
            self._learn(worker_id, blocks)
        except Exception:
            log.exception("learning a route of another replica failed")

    async def _place_reader(self) -> None:
        """Start reading the stream ``REPLAY_WINDOW_MS`` before its last entry: what the
        others routed lately, before this replica started (as far as the stream keeps it,
        ``ROUTED_STREAM_MAXLEN``), learnt ``ROUTED_READ_COUNT`` at a time, then what they
        route from now on. (A stream key of another type is refused here, and tried again as
        the reader's refusals are.)"""
        last = await self._last_routed_ms()
        self._routed_from = f"{max(0, last - REPLAY_WINDOW_MS)}-0" if last is not None else "0-0"

    async def _last_routed_ms(self) -> int | None:
        """The time part of the stream's last entry id (None: no stream)."""
        last = await self._client.xrevrange(self._keys.routed, count=1)
        return _id_ms(last[0][0]) if last else None

    async def _keep_reader_place(self) -> None:
        """Redis answers again: the reader keeps its place, unless the stream now ends before
        it (a Redis replaced, its data lost, whose new entries' ids, from a clock behind the
        old one's, would all be passed over): then it is placed again."""
        if self._routed_from is None:
            return
        last = await self._last_routed_ms()
        if last is None or last < _id_ms(self._routed_from):
            await self._place_reader()

    def _usage_fields(self) -> dict[str, str]:
        """This replica's usage hash: ``requests,tokens`` by budget, and each budget's
        schedule (``<budget>\x1fschedule``)."""
        now = time.monotonic()
        usage = {key: f"{requests},{tokens}" for key, (requests, tokens)
                 in self._usage.published(now).items()}
        usage.update({key + SCHEDULE_SUFFIX: _encode_schedule(schedule)
                      for key, schedule in self._usage.published_schedule(now).items()
                      if key in usage})
        return usage

    async def _withdraw(self) -> None:
        """Remove this replica's counts; what its budgets spent is left for the window (with
        when it leaves: the schedule, as published live)."""
        usage = self._usage_fields()
        if not self._clock.known:       # (stopped before its first sync)
            await self._read_time()
        ends_ms = self._clock.now_ms() + WINDOW_MS     # on Redis's clock, as the readers' now
        left = f"{self._keys.left_usage}{self.replica_id}:{self._instance}"
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.delete(self._key, self._usage_key, self._keys.instance + self.replica_id)
            pipe.zrem(self._keys.replicas, self.replica_id)
            if usage:
                pipe.hset(left, mapping=usage)
                pipe.pexpire(left, WINDOW_MS)
                pipe.zadd(self._keys.left_usage_set, {left: ends_ms})
            await pipe.execute()

    async def _predecessor_usage(self) -> tuple[str, int] | None:
        """Before this process's first publish (which replaces its replica id's usage hash):
        the usage a killed process of the same id left, if any, as the key to leave it under
        with the stopped replicas' and how long it has left in the window (ms). A process
        restarted after a crash under its id (a supervisor, a StatefulSet) otherwise wiped
        its predecessor's last minute. Learns Redis's time in the same round trip (once per
        process: the syncs after read it with their commands)."""
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.time()
            pipe.pttl(self._usage_key)
            pipe.get(self._keys.instance + self.replica_id)
            started = self._clock.started()
            reply, left_ms, instance = await pipe.execute()
        self._learn_time(reply, started)
        # silent for longer than in-flight counts live: dead for the others too (a hash
        # still fresh is another process's publishing under this id, warned of at the sync,
        # not a predecessor's: counted twice if carried)
        if left_ms <= 0 or left_ms > WINDOW_MS - self._ttl_ms:
            return None
        return f"{self._keys.left_usage}{self.replica_id}:{instance or 'killed'}", left_ms

    async def _read_time(self) -> None:
        """Learn Redis's time in a round trip of its own (before the first sync only: each
        sync reads it with its commands)."""
        started = self._clock.started()
        self._learn_time(await self._client.time(), started)

    def _learn_time(self, reply: Any, started: float) -> None:
        """Learn Redis's time from a ``TIME`` reply; a host whose wall clock is off it is
        logged once (sharing is timed on Redis's clock, but the host's own timestamps are
        off: its logs, and what it serves)."""
        self._clock.learn(reply, started)
        if self._clock.skewed and not self._skew_logged:
            skew = self._clock.skew_s
            log.warning("redis %s: replica %s: this host's clock is %.0f s %s Redis's (TIME); "
                        "sharing state is timed on Redis's clock and unaffected, but this "
                        "host's own timestamps (its logs') are off: fix its time sync (NTP)",
                        self._shown, self.replica_id, abs(skew),
                        "ahead of" if skew > 0 else "behind")
            self._skew_logged = True

    async def _publish(self) -> tuple[dict[str, float], list[tuple[str, float]]]:
        """Publish this replica's counts; returns the other replicas alive (by id: how long
        ago each last published, in seconds), and the usage stopped replicas left (key, the
        share of it still in the window)."""
        fields = {worker: _encode(self._local.get(worker)) for worker in self._workers}
        usage = self._usage_fields()
        predecessor = None
        if not self._first_published:    # (learns Redis's time too)
            predecessor = await self._predecessor_usage()
        elif not self._clock.known:   # nothing is timed on a host's clock
            await self._read_time()
        # Redis's time, carried from the last sync's TIME: what the others compare it with
        # was timed on the same clock, whatever the hosts' clocks say
        now_ms = self._clock.now_ms()
        # kept until the next publish lands: a Redis taking 0.5 s a round trip let the counts
        # lapse between two publishes, and the others saw none, without a failed command
        ttl_ms = max(self._ttl_ms, int(1000 * TTL_SYNCS * self.sync_seconds))
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.time()               # for the next sync: no round trip of its own
            if predecessor is not None:   # left as a stopped replica's, before it is replaced
                carried, carried_ms = predecessor
                pipe.copy(self._usage_key, carried, replace=True)
                pipe.pexpire(carried, carried_ms)
                pipe.zadd(self._keys.left_usage_set, {carried: now_ms + carried_ms})
            pipe.delete(self._key, self._usage_key)
            if fields:
                pipe.hset(self._key, mapping=fields)
                pipe.pexpire(self._key, ttl_ms)
            if usage:
                pipe.hset(self._usage_key, mapping=usage)
                # kept for the window, not the in-flight counts' few syncs: a replica paused
                # a few seconds (SIGSTOP, a VM pause, a long GC) comes back with what it
                # spent, and the others must have counted it meanwhile; a killed one's leaves
                # the window as the readers age it (``_aged_usage``)
                pipe.pexpire(self._usage_key, max(ttl_ms, WINDOW_MS))
            pipe.zadd(self._keys.replicas, {self.replica_id: now_ms})
            pipe.zremrangebyscore(self._keys.replicas, "-inf", now_ms - REPLICA_FORGET_MS)
            pipe.set(self._keys.instance + self.replica_id, self._instance,
                     px=max(self._ttl_ms, REPLICA_ALIVE_MS), get=True)
            pipe.zrangebyscore(self._keys.replicas, now_ms - REPLICA_ALIVE_MS, "+inf",
                               withscores=True)
            pipe.zremrangebyscore(self._keys.left_usage_set, "-inf", now_ms)
            pipe.zrangebyscore(self._keys.left_usage_set, now_ms, "+inf", withscores=True)
            started = self._clock.started()
            replies = await pipe.execute()
        self._first_published = True
        self._learn_time(replies[0], started)
        holder = replies[-4]
        # another process's mark two syncs running: not the one a restart left behind
        self._foreign_marks = self._foreign_marks + 1 if holder not in (
            None, self._instance) else 0
        if self._foreign_marks >= 2 and not self._shared_id_logged:
            log.warning("redis %s: another router publishes as replica %r too: give each "
                        "replica its own --replica-id (their in-flight counts overwrite each "
                        "other's)", self._shown, self.replica_id)
            self._shared_id_logged = True
        left = [(key, min(1.0, (ends_ms - now_ms) / WINDOW_MS))
                for key, ends_ms in replies[-1]]
        # how long ago each published (0 at most: Redis's clock read through two hosts'
        # round trips may put another's last publish a moment after this one's now)
        others = {replica: max(0.0, (now_ms - published_ms) / 1000)
                  for replica, published_ms in replies[-3] if replica != self.replica_id}
        return others, left

    async def _read(self, others: Mapping[str, float], left: list[tuple[str, float]]
                    ) -> tuple[dict[str, WorkerInflight], dict[str, tuple[int, int]]]:
        """The other replicas' in-flight counts by worker and budgets' usage by key (each
        replica's as of how long ago it published, ``others``), with ``left``'s usage
        (stopped replicas': its key and the share still counted)."""
        if not others and not left:
            self._usage.remote_schedule = {}
            return {}, {}
        async with self._client.pipeline(transaction=False) as pipe:
            for replica in others:
                pipe.hgetall(self._keys.inflight + replica)
                pipe.hgetall(self._keys.usage + replica)
            for key, _ in left:
                pipe.hgetall(key)
            replies = await pipe.execute()
        tables = replies[:2 * len(others)]
        # seconds since each wrote its usage: a live replica's since it published, a stopped
        # one's since it stopped (the window's share gone by), each read as of that age
        ages = list(others.values()) + [(1.0 - share) * WINDOW_S for _, share in left]
        usage_tables = tables[1::2] + replies[2 * len(others):]
        totals: dict[str, WorkerInflight] = {}
        for table in tables[0::2]:
            for worker, raw in table.items():
                try:
                    entry = _decode(raw)
                except ValueError:
                    continue
                total = totals.setdefault(worker, WorkerInflight())
                total.requests += entry.requests
                total.prefill_tokens += entry.prefill_tokens
                total.decode_tokens += entry.decode_tokens
                total.dispatched_since_scrape += entry.dispatched_since_scrape
        usage: dict[str, tuple[int, int]] = {}
        schedules: dict[str, list[list[int]]] = {}
        for table, age_s in zip(usage_tables, ages, strict=True):
            for key, raw in table.items():
                if key.endswith(SCHEDULE_SUFFIX):
                    continue
                try:
                    requests, tokens = (int(x) for x in raw.split(","))
                except ValueError:
                    continue
                written = _decode_schedule(table.get(key + SCHEDULE_SUFFIX))
                requests, tokens, schedule = _aged_usage(requests, tokens, written, age_s)
                known = usage.get(key, (0, 0))
                usage[key] = (known[0] + requests, known[1] + tokens)
                steps = schedules.setdefault(key, [[0, 0] for _ in range(SCHEDULE_STEPS)])
                for step, (left_requests, left_tokens) in zip(steps, schedule, strict=True):
                    step[0] += left_requests
                    step[1] += left_tokens
        self._usage.remote_schedule = {key: tuple((r, t) for r, t in steps)
                                       for key, steps in schedules.items()}
        return totals, usage


def _encode_schedule(schedule: Schedule) -> str:
    return ";".join(f"{requests},{tokens}" for requests, tokens in schedule)


def _decode_schedule(raw: str | None) -> Schedule | None:
    """A published schedule, or None when absent or not ``SCHEDULE_STEPS`` pairs."""
    if raw is None:
        return None
    try:
        pairs = tuple((int(r), int(t)) for r, t in (pair.split(",") for pair in raw.split(";")))
    except ValueError:
        return None
    return pairs if len(pairs) == SCHEDULE_STEPS else None


def _aged_usage(requests: int, tokens: int, written: Schedule | None,
                age_s: float) -> tuple[int, int, Schedule]:
    """A replica's totals and schedule (``written``, if it publishes one) as of now,
    ``age_s`` after it published them. A replica that syncs is a fraction of a second old
    and read as published; one paused, killed or stopped since (a stopped one's age counted
    from its stop) is read from its schedule at the steps wholly past: all of it for the
    first ``SCHEDULE_STEP_S``, so a paused replica's burst is counted whole until it returns
    and a drained one's spending is not handed back (read fading evenly, a tenant got the
    faded part again meanwhile: twice its limit in the minute), and never less than is still
    in the window (what stays only falls). Without a schedule it fades evenly after the first
    step."""
    steps = int(age_s // SCHEDULE_STEP_S)
    if written is None:        # (a replica not publishing one)
        share = 1.0 if steps == 0 else max(0.0, 1.0 - age_s / WINDOW_S)
        requests, tokens = math.ceil(requests * share), math.ceil(tokens * share)
        return requests, tokens, _fading_schedule(requests, tokens, share)
    if steps > 0:
        requests, tokens = written[steps - 1] if steps <= SCHEDULE_STEPS else (0, 0)
    return requests, tokens, _schedule_since(written, age_s)


def _schedule_since(schedule: Schedule, elapsed_s: float) -> Schedule:
    """A schedule written ``elapsed_s`` ago, as from now: each step reads the written step
    at or before its time (what stays only falls, so never too little)."""
    shifted = []
    for step in range(1, SCHEDULE_STEPS + 1):
        written = int((elapsed_s + step * SCHEDULE_STEP_S) // SCHEDULE_STEP_S)
        shifted.append(schedule[written - 1] if written <= SCHEDULE_STEPS else (0, 0))
    return tuple(shifted)


def _fading_schedule(requests: int, tokens: int, share: float) -> Schedule:
    """What of ``requests`` and ``tokens`` stays after each step when they fade evenly to
    nothing over the ``share`` of the window left to them."""
    steps = []
    for step in range(1, SCHEDULE_STEPS + 1):
        left = share - step * SCHEDULE_STEP_S / WINDOW_S
        fraction = left / share if left > 0 and share > 0 else 0.0
        steps.append((math.ceil(requests * fraction), math.ceil(tokens * fraction)))
    return tuple(steps)


_PIPELINE_ERROR = re.compile(r"^Command # \d+ \(.*?\) of pipeline caused error: ", re.DOTALL)
_QUOTED_ARGS = re.compile(r",?\s*with args beginning with.*", re.DOTALL)
_REFUSAL_NUMBERS = re.compile(r"\d+")


def _refusal(exc: ResponseError) -> str:
    """Redis's refusal without the command or its arguments, the routed prompts' hashes
    among them: a pipeline's error names its command with them, and Redis's own
    ``unknown command 'XADD', with args beginning with: …`` quotes them too."""
    text = _QUOTED_ARGS.sub("", _PIPELINE_ERROR.sub("", str(exc), count=1))
    return text if len(text) <= 200 else text[:197] + "..."


def _refusal_kind(reason: str) -> str:
    """A refusal (``_refusal``'s) less what may vary between two tries of the same command:
    its numbers (what it quoted of the arguments is gone already)."""
    return _REFUSAL_NUMBERS.sub("", reason)


def _demoted(exc: BaseException) -> bool:
    """Whether Redis answered as a replica: a primary a failover demoted (READONLY to a write;
    a blocked read cut with UNBLOCKED as it turned replica), reached through a connection
    opened before its address moved to the new primary."""
    return isinstance(exc, ReadOnlyError) or (
        isinstance(exc, ResponseError) and str(exc).startswith("UNBLOCKED")
        and "instance state changed" in str(exc))


# OOM's (redis-py has had it since 4.x; its type stubs lag)
_OUT_OF_MEMORY: type[ResponseError] = redis_exceptions.OutOfMemoryError  # type: ignore[attr-defined]


def _only_refused(exc: Exception) -> bool:
    """Redis answered, refusing writes for a reason known to leave reads working: out of
    memory (``noeviction``), a read-only replica, a failed save (``MISCONF``). Not a refused
    login, nor refusals that may refuse reads too (``MASTERDOWN``, ``NOPERM``, ``BUSY``):
    each follow-up would pay a failing read."""
    return (isinstance(exc, _OUT_OF_MEMORY | ReadOnlyError) or _demoted(exc)
            or (isinstance(exc, ResponseError) and "MISCONF" in str(exc)))


def _failure(exc: Exception) -> str:
    """What went wrong with Redis, for the log: not every failure is an unreachable server."""
    text = _refusal(exc) if isinstance(exc, ResponseError) else str(exc)
    if _demoted(exc):
        return (f"answered as a read-only replica ({text}): a failover? its connections are "
                f"closed and opened again through the address")
    if isinstance(exc, AuthenticationError) or (isinstance(exc, ResponseError) and text.startswith(
            ("NOAUTH", "WRONGPASS", "HELLO must be called with the client already "
             "authenticated"))):
        return f"refused this replica: authentication ({text}); check the password in --redis-url"
    if isinstance(exc, ResponseError):
        return f"refused a command ({text})"
    return f"unreachable ({text})"


def encode_blocks(block_hashes: Mapping[int, Sequence[int]]) -> str:
    """``"16:<base64 of the chain as little-endian uint64s>;..."`` ("" when no chain)."""
    parts = []
    for size, chain in block_hashes.items():
        if not chain:
            continue
        packed = chain if isinstance(chain, array) and chain.typecode == "Q" else array(
            "Q", chain)
        if packed.itemsize != 8:
            continue
        if sys.byteorder == "big":
            packed = array("Q", packed)
            packed.byteswap()
        parts.append(f"{size}:{base64.b64encode(packed.tobytes()).decode()}")
    return ";".join(parts)


def decode_blocks(text: str) -> dict[int, array[int]]:
    """``encode_blocks``'s inverse; ValueError for text of another form."""
    blocks: dict[int, array[int]] = {}
    for part in text.split(";"):
        size, _, packed = part.partition(":")
        raw = base64.b64decode(packed, validate=True)
        if not size.isdigit() or len(raw) % 8:
            raise ValueError(part[:40])
        chain = array("Q")
        chain.frombytes(raw)
        if sys.byteorder == "big":
            chain.byteswap()
        blocks[int(size)] = chain
    return blocks


def _stream_entries(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """The entries of an XREAD reply for one stream (RESP2 list or RESP3 map)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        streams = list(reply.values())
        return [(entry_id, fields) for entry_id, fields in (streams[0][0] if streams and
                                                             streams[0] else [])]
    return [(entry_id, fields) for entry_id, fields in reply[0][1]]


def _id_ms(entry_id: str | bytes) -> int:
    """The milliseconds part of a stream entry id (``MS-SEQ``)."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0])
