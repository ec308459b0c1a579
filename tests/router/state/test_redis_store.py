"""The Redis state store against a real redis-server: replicas see each other's in-flight
counts, a closed or dead replica's counts go away, an unreachable Redis degrades to local,
and a Redis restarted on its address is used again."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import redis.asyncio as redis
from redis import exceptions as redis_exceptions

from bench.redis_server import start_redis
from router.state.redis_store import (
    MAX_ROUTED_PENDING,
    ROUTED_SEND_COUNT,
    RedisKeys,
    RedisStateStore,
    _only_refused,
    encode_blocks,
    shown_url,
)
from workers.ports import free_port

pytestmark = pytest.mark.integration

KEYS = RedisKeys()            # the default prefix's
REPLICAS_KEY = KEYS.replicas
LEFT_USAGE_KEY = KEYS.left_usage_set


async def test_replicas_share_inflight_counts(redis_url: str) -> None:
    one = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    two = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    await one.start()
    await two.start()
    try:
        one.on_dispatch("w1", 100, 10)
        one.on_dispatch("w1", 50, 5)
        two.on_dispatch("w1", 7, 3)
        two.on_dispatch("w2", 1, 1)
        await one.sync_once()
        await two.sync_once()
        await one.sync_once()
        seen_by_two = two.inflight.get("w1")
        assert (seen_by_two.requests, seen_by_two.prefill_tokens,
                seen_by_two.decode_tokens) == (3, 157, 18)
        assert one.inflight.get("w2").requests == 1
        assert one.inflight.get("w1").dispatched_since_scrape == 3

        one.on_complete("w1", 100, 10)
        one.inflight.on_scrape("w1")            # a scrape resets only the local part
        await one.sync_once()
        await two.sync_once()
        w1 = two.inflight.get("w1")
        assert (w1.requests, w1.prefill_tokens, w1.decode_tokens) == (2, 57, 8)
        assert one.inflight.get("w1").dispatched_since_scrape == 1
        assert not one.degraded and not two.degraded
    finally:
        await one.close()
        await two.close()


async def test_a_forgotten_worker_leaves_once_it_serves_nothing(redis_url: str) -> None:
    """A worker removed from the fleet kept its in-flight entry for good with Redis (the
    in-memory store dropped it)."""
    store = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    await store.start()
    try:
        store.on_dispatch("gone", 10, 10)
        store.forget_worker("gone")             # still serving one: kept, still counted
        assert store.inflight.get("gone").requests == store.local_requests("gone") == 1
        store.on_complete("gone", 10, 10)
        store.forget_worker("gone")
        assert "gone" not in store._local._by_worker
    finally:
        await store.close()


async def test_closed_replica_counts_disappear(redis_url: str) -> None:
    one = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    two = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    await one.start()
    await two.start()
    one.on_dispatch("w1", 10, 10)
    await one.sync_once()
    await two.sync_once()
    assert two.inflight.get("w1").requests == 1
    await one.close()
    await two.sync_once()
    assert two.inflight.get("w1").requests == 0
    await two.close()


async def test_closing_ends_the_sync_loop_even_if_a_sync_swallows_the_cancellation(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = RedisStateStore(redis_url, "r1", sync_interval_s=0.01)
    await store.start()
    syncing = asyncio.Event()

    async def swallowing_sync() -> None:      # as a client library may, mid-command
        syncing.set()
        try:
            await asyncio.sleep(0.5)
        except asyncio.CancelledError:
            return

    monkeypatch.setattr(store, "sync_once", swallowing_sync)
    await asyncio.wait_for(syncing.wait(), 5)
    await asyncio.wait_for(store.close(), 5)    # the loop ended instead of syncing for ever


async def test_dead_replica_counts_expire(redis_url: str) -> None:
    # (its counts live 1 s: 0.2 s was outlived by the next step on a loaded machine)
    dead = RedisStateStore(redis_url, "dead", sync_interval_s=60, ttl_s=1.0)
    alive = RedisStateStore(redis_url, "alive", sync_interval_s=60)
    await dead.start()
    await alive.start()
    try:
        dead.on_dispatch("w1", 10, 10)
        await dead.sync_once()         # then never again, as if the process died
        await alive.sync_once()
        assert alive.inflight.get("w1").requests == 1
        await _in_flight_expired(redis_url, "dead")
        await alive.sync_once()
        assert alive.inflight.get("w1").requests == 0
    finally:
        await alive.close()


async def test_unreachable_redis_degrades_to_local_state() -> None:
    store = RedisStateStore(f"redis://127.0.0.1:{free_port()}/0", "r1", sync_interval_s=60)
    await store.start()
    try:
        assert store.degraded
        store.on_dispatch("w1", 5, 5)
        assert store.inflight.get("w1").requests == 1
    finally:
        await store.close()


async def test_the_log_never_shows_the_redis_password(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    store = RedisStateStore(f"redis://:s3cret-pass@127.0.0.1:{port}/0", "r1",
                            sync_interval_s=60)
    with caplog.at_level(logging.WARNING, logger="router.state.redis_store"):
        await store.start()
    try:
        assert store.degraded
        (line,) = [r.getMessage() for r in caplog.records]
        assert line.startswith(f"redis redis://***@127.0.0.1:{port}/0 unreachable (")
        assert line.endswith(": routing on local state")
        assert "s3cret" not in line
    finally:
        await store.close()
    assert shown_url("redis://h:6379/0") == "redis://h:6379/0"
    assert shown_url("rediss://user:pw@h/1") == "rediss://***@h/1"
    # redis-py takes a password in the query too: it was logged as given
    assert shown_url("redis://h:6379/0?password=s3cret") == "redis://h:6379/0?password=***"
    assert shown_url("unix:///tmp/r.sock?password=s3cret&db=0") == (
        "unix:///tmp/r.sock?password=***&db=0")


@pytest.mark.parametrize(("url", "shown"), [
    # yarl read no password in these (a '#' or '?' ends its host part): shown as given
    ("redis://:42200#Secret@10.9.9.9:6379", "redis://***@10.9.9.9:6379"),
    ("redis://user:6379?Secret@10.9.9.9:6379/0", "redis://***@10.9.9.9:6379/0"),
    ("redis://:pa@ss@h:6379/0", "redis://***@h:6379/0"),
    ("redis://h:6379/0?password=Secret", "redis://h:6379/0?password=***"),
])
def test_the_log_masks_all_before_the_last_at_whatever_a_parser_reads(url: str,
                                                                       shown: str) -> None:
    assert shown_url(url) == shown


async def test_replicas_share_the_owners_of_responses(redis_url: str) -> None:
    one = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    two = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    await one.start()
    await two.start()
    try:
        await one.remember_response("resp_a", "w2")      # written in the background
        await _until(lambda: one.unsaved_owners == 0)
        assert await two.response_owner("resp_a") == "w2"
        assert await two.response_owner("resp_b") is None
        await two.remember_response("resp_a", "w3")     # a retry made it elsewhere
        assert await two.response_owner("resp_a") == "w3"
    finally:
        await one.close()
        await two.close()


async def test_replicas_share_the_tenant_of_a_response(redis_url: str) -> None:
    """The tenant whose key made a response travels with its owner, in a key of its own that
    a replica of the release before does not read (it reads the owner as it did)."""
    from router.state.response_owners import ResponseRecord

    one = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    two = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    admin = redis.Redis.from_url(redis_url, decode_responses=True)
    await one.start()
    await two.start()
    try:
        await one.remember_response("resp_t", "w1", "acme")
        await one.remember_response("resp_u", "w2")
        await _until(lambda: one.unsaved_owners == 0)
        assert await two.response_record("resp_t") == ResponseRecord("w1", "acme")
        assert await two.response_record("resp_u") == ResponseRecord("w2", None)
        assert await admin.get("kvroute:response:resp_t") == "w1"
        # found by asking the workers (Redis away, or the record not written yet): no tenant
        # known, and the one recorded stays (it was deleted, for every replica)
        await one.remember_response("resp_t", "w3")
        await _until(lambda: one.unsaved_owners == 0)
        assert await admin.get("kvroute:response-tenant:resp_t") == "acme"
        three = RedisStateStore(redis_url, "r3", sync_interval_s=60)
        await three.start()
        assert await three.response_record("resp_t") == ResponseRecord("w3", "acme")
        await three.close()
    finally:
        await one.close()
        await two.close()
        await admin.aclose()


async def test_owners_in_a_full_redis_are_still_read_while_it_refuses_writes(
        redis_url: str) -> None:
    """A Redis at its memory limit under ``noeviction`` refuses the sync's writes (OOM) and
    the store is set aside; the owners it holds are still read (follow-ups of responses
    another replica made found their worker)."""
    one = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    two = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    admin = redis.Redis.from_url(redis_url, decode_responses=True)
    await one.start()
    await two.start()
    try:
        await one.remember_response("resp_full", "w2", "acme")
        await _until(lambda: one.unsaved_owners == 0)
        await admin.config_set("maxmemory-policy", "noeviction")
        await admin.config_set("maxmemory", 1)        # every write refused from now on
        await two.sync_once()
        assert two.degraded
        from router.state.response_owners import ResponseRecord
        assert await two.response_record("resp_full") == ResponseRecord("w2", "acme")
        assert await two.response_record("resp_never") is None
        assert two.degraded
        await admin.config_set("maxmemory", 0)
        await two.sync_once()
        assert not two.degraded
    finally:
        await one.close()
        await two.close()
        await admin.aclose()


async def test_a_response_owner_expires_from_redis_after_its_time_to_live(
        redis_url: str) -> None:
    import redis.asyncio as aioredis

    response_prefix = KEYS.response

    default = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    short = RedisStateStore(redis_url, "r2", sync_interval_s=60, response_ttl_s=90)
    await default.start()
    await short.start()
    client = aioredis.from_url(redis_url)
    try:
        await default.remember_response("resp_week", "w1")
        await short.remember_response("resp_short", "w2")
        await _until(lambda: default.unsaved_owners == short.unsaved_owners == 0)
        assert 7 * 24 * 3600 - 5 <= await client.ttl(response_prefix + "resp_week") <= 7 * 24 * 3600
        assert 85 <= await client.ttl(response_prefix + "resp_short") <= 90
    finally:
        await client.aclose()
        await default.close()
        await short.close()
    with pytest.raises(ValueError, match="response_ttl_s: must be at least 1 second"):
        RedisStateStore(redis_url, "r3", response_ttl_s=0.5)


async def test_response_owners_stay_local_while_redis_is_unreachable() -> None:
    store = RedisStateStore(f"redis://127.0.0.1:{free_port()}/0", "r1", sync_interval_s=60)
    await store.start()
    try:
        assert store.degraded
        await store.remember_response("resp_a", "w1")
        assert await store.response_owner("resp_a") == "w1"
        assert await store.response_owner("resp_b") is None
    finally:
        await store.close()


class RestartableRedis:
    """A redis-server of the test's own that can be stopped and started again on its port."""

    def __init__(self, binary: str, options: Sequence[str] = ()) -> None:
        """``options``: added to each start's command line (``--dir D``: a ``SAVE`` before a
        stop is loaded again at the next start)."""
        self.binary = binary
        self.options = tuple(options)
        proc, self.port = start_redis(binary, options=self.options)
        self.procs: list[subprocess.Popen[bytes]] = [proc]
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        proc = self.procs[-1]
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)

    def start_again(self) -> None:
        self.procs.append(start_redis(self.binary, port=self.port,   # the same address
                                      options=self.options)[0])

    def cleanup(self) -> None:
        for started in self.procs:
            if started.poll() is None:
                os.kill(started.pid, signal.SIGTERM)
                started.wait(timeout=10)


@pytest.fixture
def restartable_redis() -> Iterator[RestartableRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make test installs it)")
    redis_server = RestartableRedis(binary)
    try:
        yield redis_server
    finally:
        redis_server.cleanup()


async def _in_flight_expired(redis_url: str, replica: str, timeout_s: float = 5.0) -> None:
    """Wait until ``replica``'s in-flight counts have expired in Redis: their time-to-live is
    at least ``TTL_SYNCS`` times its last sync's duration, so a fixed wait past ``ttl_s`` fell
    short on a loaded machine."""
    client = redis.Redis.from_url(redis_url)
    try:
        deadline = time.monotonic() + timeout_s
        while await client.exists(f"kvroute:inflight:{replica}"):
            assert time.monotonic() < deadline, "its in-flight counts never expired"
            await asyncio.sleep(0.02)
    finally:
        await client.aclose()


async def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        await asyncio.sleep(0.01)


async def _sync_until(stores: list[RedisStateStore], degraded: bool) -> None:
    """Sync each store until all are (or are not) degraded: a connection the restart broke is
    found broken by the command that uses it, and the next one opens a new connection."""
    for _ in range(20):
        for store in stores:
            await store.sync_once()
        if all(store.degraded == degraded for store in stores):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"stores still {'not ' if degraded else ''}degraded")


async def test_a_redis_restarted_on_its_address_is_shared_again(
        restartable_redis: RestartableRedis) -> None:
    one = RedisStateStore(restartable_redis.url, "r1", sync_interval_s=60)
    two = RedisStateStore(restartable_redis.url, "r2", sync_interval_s=60)
    try:
        await one.start()
        await two.start()
        one.on_dispatch("w1", 10, 1)
        await _sync_until([one, two], degraded=False)
        assert two.inflight.get("w1").requests == 1

        restartable_redis.stop()
        await _sync_until([one, two], degraded=True)
        assert two.inflight.get("w1").requests == 0      # routes on its own counts
        assert one.inflight.get("w1").requests == 1

        restartable_redis.start_again()                  # empty
        await _sync_until([one, two], degraded=False)
        assert two.inflight.get("w1").requests == 1      # r1 published its counts again
    finally:
        await one.close()
        await two.close()


class Forwarder:
    """A stable address in front of a Redis, as a DNS name, a virtual IP or a proxy: each new
    connection goes to the port it names now; those opened before stay where they went."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, upstream}
        await asyncio.gather(self._pipe(reader, upstream), self._pipe(upstream_reader, writer))

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    def cut(self) -> None:
        """Close the connections open now (the next ones go to ``target``)."""
        for writer in self._writers:
            writer.close()
        self._writers.clear()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        await self._server.wait_closed()


async def test_a_failover_behind_a_stable_address_is_followed(
        restartable_redis: RestartableRedis, redis_url: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """Its replica promoted, the primary made the new one's replica and the address moved to
    the new one: the pooled connections stayed on the demoted primary, whose READONLY answers
    redis-py does not close a connection for. The router flapped between degraded and back
    (45 times in 30 s), then stayed degraded, and its routes still got READONLY 88 s later."""
    from array import array

    first_port = restartable_redis.port
    second_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    first = redis.Redis(host="127.0.0.1", port=first_port)
    second = redis.Redis(host="127.0.0.1", port=second_port)
    for server in (first, second):        # no copy of the data written to the disk
        await server.config_set("repl-diskless-sync", "yes")
        await server.config_set("repl-diskless-load", "swapdb")
    await second.replicaof("127.0.0.1", first_port)
    forwarder = Forwarder(first_port)
    url = f"redis://127.0.0.1:{await forwarder.start()}/0"
    one = RedisStateStore(url, "r1", sync_interval_s=0.05)
    two = RedisStateStore(url, "r2", sync_interval_s=0.05)
    learnt: list[str] = []
    two.follow_routed(lambda worker, blocks: learnt.append(worker))

    def sharing(worker: str) -> bool:
        return (not one.degraded and not two.degraded and one.replicas == two.replicas == 2
                and two.inflight.get(worker).requests == 1)

    try:
        await one.start()
        await two.start()
        one.on_dispatch("w1", 10, 1)
        await one.remember_response("resp_1", "w1")
        await _until(lambda: sharing("w1") and one.unsaved_owners == 0)
        one.on_routed_blocks("w1", {16: array("Q", [1])})
        await _until(lambda: learnt == ["w1"])

        with caplog.at_level(logging.INFO, logger="router.state.redis_store"):
            await second.replicaof("NO", "ONE")
            await first.replicaof("127.0.0.1", second_port)
            forwarder.target = second_port
            one.on_complete("w1", 0, 1)
            one.on_dispatch("w2", 10, 1)
            await _until(lambda: sharing("w2"))
            await one.remember_response("resp_2", "w2")
            await _until(lambda: one.unsaved_owners == 0)
            assert await second.get("kvroute:response:resp_2") == b"w2"
            two._owners = type(two._owners)()       # not remembered locally: read from Redis
            assert await two.response_owner("resp_2") == "w2"
            one.on_routed_blocks("w2", {16: array("Q", [2])})
            await _until(lambda: learnt == ["w1", "w2"])
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:      # and stays so: no flapping
                assert sharing("w2")
                await asyncio.sleep(0.01)
        lines = [r.getMessage() for r in caplog.records]
        # per replica at most: gone (read-only), back (a command under way is not cut by the
        # reconnect: no "still away, now unreachable")
        assert len(lines) <= 4, lines
        assert not [line for line in lines if "16:" in line or "XADD" in line], lines
    finally:
        await one.close()
        await two.close()
        await forwarder.close()
        await first.replicaof("NO", "ONE")
        await first.aclose()
        await second.aclose()


@pytest.mark.parametrize("path", ["sync", "owners", "routes"])
async def test_a_read_only_replica_behind_the_address_is_left_for_the_primary(
        restartable_redis: RestartableRedis, redis_url: str,
        caplog: pytest.LogCaptureFixture, path: str) -> None:
    """The address names the demoted primary for a while (a DNS record not yet updated, a
    proxy flapping): whichever command meets its READONLY first, the sync's, an owner's write
    or a routed prompt's, the pool's connections are closed, and once the address names the
    primary the store shares again at its next sync. Before, READONLY was a reply like any
    other and the connections stayed: degraded for good (a routed prompt's even left the store
    sharing but its routes refused for 10 s at a time, the refusal quoting their hashes)."""
    from array import array

    primary_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    replica = redis.Redis(host="127.0.0.1", port=restartable_redis.port)
    primary = redis.Redis(host="127.0.0.1", port=primary_port)
    forwarder = Forwarder(primary_port)
    url = f"redis://127.0.0.1:{await forwarder.start()}/0"
    store = RedisStateStore(url, "r1", sync_interval_s=60)
    try:
        for server in (primary, replica):     # no copy of the data written to the disk
            await server.config_set("repl-diskless-sync", "yes")
            await server.config_set("repl-diskless-load", "swapdb")
        await replica.replicaof("127.0.0.1", primary_port)
        await store.start()
        store.on_dispatch("w1", 10, 1)
        await store.sync_once()
        assert not store.degraded
        forwarder.target = restartable_redis.port
        forwarder.cut()
        await asyncio.sleep(0.2)      # seen closed: the next command connects to the replica
        with caplog.at_level(logging.INFO, logger="router.state.redis_store"):
            if path == "sync":
                await store.sync_once()
            elif path == "owners":
                await store.remember_response("resp_1", "w1")
            else:
                store.on_routed_blocks("w1", {16: array("Q", [7])})
            # set aside, and the reconnect that follows ended (a background write's: the
            # store is degraded before its connections are closed)
            await _until(lambda: store.degraded
                         and store._reconnects_ended == store._reconnects_begun)
            forwarder.target = primary_port          # no connection cut: the store's doing
            await store.sync_once()
            assert not store.degraded
            await store.sync_once()
            await _until(lambda: store.unsaved_owners == 0
                         and store.routed_shared[0] == (path == "routes"))
        assert not store.degraded
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 2, lines
        assert "answered as a read-only replica" in lines[0], lines
        assert "routing on local state" in lines[0]
        assert "16:" not in lines[0] and "kvroute:" not in lines[0]    # no command quoted
        assert "reachable again: sharing state with 0 other replica(s)" in lines[1], lines
        assert await primary.hget("kvroute:inflight:r1", "w1") is not None
        if path == "owners":
            assert await primary.get("kvroute:response:resp_1") == b"w1"
        if path == "routes":
            assert await primary.xlen("kvroute:routed") == 1
    finally:
        await store.close()
        await forwarder.close()
        await replica.replicaof("NO", "ONE")
        await replica.aclose()
        await primary.aclose()


@pytest.fixture
def sleepy_redis() -> Iterator[str]:
    """A redis-server that takes ``DEBUG SLEEP`` (a Redis busy for a while, on demand)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make test installs it)")
    proc, port = start_redis(binary, options=["--enable-debug-command", "yes"])
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


async def test_a_reconnect_leaves_the_commands_under_way_to_finish(
        sleepy_redis: str, caplog: pytest.LogCaptureFixture) -> None:
    """A reconnect (a blocked read cut as its server turned replica, met by the routes reader
    while the store shares) while a sync and an owner's lookup wait on a busy Redis: closing
    their connections under them failed both (redis-py does not send a cut command again),
    the store was set aside ("unreachable (Connection closed by server.)", then "reachable
    again") and the owner not found."""
    store = RedisStateStore(sleepy_redis, "r1", sync_interval_s=60)
    admin = redis.Redis.from_url(sleepy_redis)
    try:
        await store.start()
        await store.remember_response("resp_1", "w1")
        await _until(lambda: store.unsaved_owners == 0)
        store._owners = type(store._owners)()      # not remembered locally: read from Redis
        with caplog.at_level(logging.INFO, logger="router.state.redis_store"):
            busy = asyncio.create_task(admin.execute_command("DEBUG", "SLEEP", "0.5"))
            await asyncio.sleep(0.05)
            sync = asyncio.create_task(store.sync_once())
            owner = asyncio.create_task(store.response_record("resp_1"))
            await asyncio.sleep(0.05)                 # both sent, waiting on Redis
            await store._reconnect()
            await asyncio.gather(busy, sync)
            record = await owner
        assert record is not None and record.worker == "w1"
        assert not store.degraded and store.errors == 0
        assert [r.getMessage() for r in caplog.records] == []
    finally:
        await store.close()
        await admin.aclose()


async def test_a_command_that_took_a_connection_the_reconnect_closed_is_sent_again(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A command that takes an idle connection of the pool just as a reconnect closes them
    is not taken for Redis gone: it is sent again on a new connection."""
    store = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    try:
        await store.start()
        await store.remember_response("resp_1", "w1")
        await _until(lambda: store.unsaved_owners == 0)
        store._owners = type(store._owners)()
        with caplog.at_level(logging.INFO, logger="router.state.redis_store"):
            for steps in range(12):     # started as far into the reconnect (loop steps)
                await store.sync_once()                # the pool's connections idle
                reconnect = asyncio.create_task(store._reconnect())
                for _ in range(steps):
                    await asyncio.sleep(0)
                owner = asyncio.create_task(store.response_record("resp_1"))
                sync = asyncio.create_task(store.sync_once())
                await reconnect
                record = await owner
                await sync
                assert record is not None and record.worker == "w1", steps
                assert not store.degraded, steps
                store._owners = type(store._owners)()
        assert [r.getMessage() for r in caplog.records] == []
        assert store.errors == 0
    finally:
        await store.close()


async def _connections_received(server: redis.Redis) -> int:
    info = await server.info("stats")
    return int(info["total_connections_received"])


async def _replica_of(replica: redis.Redis, primary: redis.Redis, primary_port: int) -> None:
    """``replica`` made ``primary``'s replica, no copy of the data written to the disk (a
    ``dump.rdb`` left in the working directory is loaded by the next redis-server)."""
    for server in (primary, replica):
        await server.config_set("repl-diskless-sync", "yes")
        await server.config_set("repl-diskless-load", "swapdb")
    await replica.replicaof("127.0.0.1", primary_port)


async def test_an_address_naming_a_replica_for_good_is_not_reconnected_to_at_every_sync(
        restartable_redis: RestartableRedis, redis_url: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """``--redis-url`` names a replica (not a failover: it stays one). Each sync met READONLY
    and closed the pool: a new connection ten times a second for ever (30 in 3 s)."""
    primary_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    replica = redis.Redis(host="127.0.0.1", port=restartable_redis.port)
    primary = redis.Redis(host="127.0.0.1", port=primary_port)
    store = RedisStateStore(restartable_redis.url, "r1", sync_interval_s=0.1)
    try:
        await _replica_of(replica, primary, primary_port)
        before = await _connections_received(replica)
        with caplog.at_level(logging.INFO, logger="router.state.redis_store"):
            await store.start()
            await asyncio.sleep(3.0)
        assert store.degraded
        opened = await _connections_received(replica) - before
        # the first, then one at each reconnect: at once, 1 s later, 3 s after the first
        assert opened <= 4, opened
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and "answered as a read-only replica" in lines[0], lines
    finally:
        await store.close()
        await replica.replicaof("NO", "ONE")
        await replica.aclose()
        await primary.aclose()


async def test_an_address_naming_a_replica_for_good_is_logged_once_and_backed_off(
        restartable_redis: RestartableRedis, redis_url: str,
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reconnects to an address answering as a replica are spaced out, each gap twice the
    last up to a ceiling; after several in a row the log says once that ``--redis-url`` names
    a replica; a write that works (the address names the primary again) starts over."""
    from router.state import redis_store

    monkeypatch.setattr(redis_store, "RECONNECT_MIN_S", 0.1)
    monkeypatch.setattr(redis_store, "RECONNECT_MAX_S", 0.4)
    primary_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    replica = redis.Redis(host="127.0.0.1", port=restartable_redis.port)
    primary = redis.Redis(host="127.0.0.1", port=primary_port)
    forwarder = Forwarder(restartable_redis.port)
    url = f"redis://127.0.0.1:{await forwarder.start()}/0"
    store = RedisStateStore(url, "r1", sync_interval_s=0.01)
    try:
        await _replica_of(replica, primary, primary_port)
        with caplog.at_level(logging.INFO, logger="router.state.redis_store"):
            before = await _connections_received(replica)
            await store.start()
            await asyncio.sleep(2.0)
            # at once, then after 0.1, 0.2, 0.4, 0.4, 0.4, 0.4 s: 7 at most
            opened = await _connections_received(replica) - before
            assert 4 <= opened <= 8, opened
            lines = [r.getMessage() for r in caplog.records]
            assert len(lines) == 2, lines
            assert "answered as a read-only replica" in lines[0]
            assert "answers as a read-only replica" in lines[1]
            assert "--redis-url should name the primary" in lines[1]
            assert "16:" not in lines[1] and "kvroute:" not in lines[1]
            forwarder.target = primary_port
            await _until(lambda: not store.degraded)
            forwarder.target = restartable_redis.port
            forwarder.cut()
            await _until(lambda: store.degraded)
            before = await _connections_received(replica)
            await asyncio.sleep(0.35)      # gaps from 0.1 s again: 0.1, 0.2 (not 0.4)
            opened = await _connections_received(replica) - before
            assert opened >= 2, opened
            await asyncio.sleep(1.5)
            # back (and the replicas sharing, at the first sync that works), away (the cut
            # may be seen first); a new run of reconnects: logged again, once
            lines = [r.getMessage() for r in caplog.records][2:]
            assert "reachable again" in lines[0], lines
            assert sum("--redis-url should name the primary" in line for line in lines) == 1
            assert "--redis-url should name the primary" in lines[-1], lines
    finally:
        await store.close()
        await forwarder.close()
        await replica.replicaof("NO", "ONE")
        await replica.aclose()
        await primary.aclose()


async def test_replicas_share_the_budgets_usage(redis_url: str) -> None:
    one = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    two = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    await one.start()
    await two.start()
    try:
        now = time.monotonic()
        one.usage.add("acme", now, requests=2, tokens=300)
        two.usage.add("acme", now, requests=1, tokens=50)
        two.usage.add("*", now, requests=4)
        await one.sync_once()
        await two.sync_once()
        await one.sync_once()
        assert one.usage.totals("acme", now) == (3, 350)
        assert two.usage.totals("acme", now) == (3, 350)
        assert one.usage.totals("*", now) == (4, 0)
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        assert sorted(await client.zrange(REPLICAS_KEY, 0, -1)) == ["r1", "r2"]
        await client.aclose()
        await two.close()        # a replica that stops leaves its spending in the window
        await one.sync_once()
        assert one.usage.totals("acme", now) == (3, 350)
        assert one.usage.totals("*", now) == (4, 0)
    finally:
        await one.close()
        await two.close()
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    assert await client.zrange(REPLICAS_KEY, 0, -1) == []
    await client.aclose()


async def test_a_stopped_replicas_spending_leaves_the_window_as_it_was_spent(
        redis_url: str) -> None:
    """A replica that stopped took its budgets' spending away at once: a rolling restart
    gave every tenant back each restarted replica's share of the last minute. It stays
    counted, also by the replica restarted under its id, each part until it leaves the
    window (read fading evenly from the stop, a budget spent just before a drain had room
    again within seconds: twice the limit in the minute)."""
    one = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    two = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    await one.start()
    await two.start()
    restarted = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    try:
        now = time.monotonic()
        two.usage.add("acme", now, requests=10, tokens=1000)
        await two.close()
        await restarted.start()          # the same replica id, a new process
        await one.sync_once()
        assert one.usage.totals("acme", now) == (10, 1000)
        assert restarted.usage.totals("acme", now) == (10, 1000)
        # spent a moment ago, it leaves in a minute: so says Retry-After (taken to fade
        # evenly, the budget read as having room within seconds)
        assert one.usage.remote_schedule["acme"] == ((10, 1000),) * 5
        assert one.usage.seconds_until("acme", now, 10, None) == 60
        # half the window later (its end moved 30 s nearer), all of it is still counted:
        # it was spent a moment before the stop
        [(left, ends_ms)] = await client.zrange(LEFT_USAGE_KEY, 0, -1, withscores=True)
        await client.zadd(LEFT_USAGE_KEY, {left: ends_ms - 30_000})
        await one.sync_once()
        assert one.usage.totals("acme", now) == (10, 1000)
        # the schedule read from 30 s on: all of it stays until its last step
        assert one.usage.remote_schedule["acme"] == ((10, 1000), (10, 1000), (0, 0), (0, 0),
                                                     (0, 0))
        # out of it (well past: the store reads Redis's clock, a few ms off the host's)
        await client.zadd(LEFT_USAGE_KEY, {left: time.time() * 1000 - 5_000})
        await one.sync_once()
        assert one.usage.totals("acme", now) == (0, 0)
        assert await client.zcard(LEFT_USAGE_KEY) == 0       # dropped from the set
    finally:
        await one.close()
        await two.close()
        await restarted.close()
        await client.aclose()


async def test_a_stopped_replicas_older_spending_leaves_before_its_newer(
        redis_url: str) -> None:
    """What a stopped replica spent 40 s before it stopped leaves the window 20 s after the
    stop; what it spent at the stop stays to the minute's end."""
    one = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    two = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    await one.start()
    await two.start()
    try:
        now = time.monotonic()
        two.usage.add("acme", now - 40, requests=6, tokens=600)
        two.usage.add("acme", now, requests=4, tokens=400)
        await two.close()
        await one.sync_once()
        assert one.usage.totals("acme", now) == (10, 1000)
        [(left, ends_ms)] = await client.zrange(LEFT_USAGE_KEY, 0, -1, withscores=True)
        await client.zadd(LEFT_USAGE_KEY, {left: ends_ms - 25_000})
        await one.sync_once()
        assert one.usage.totals("acme", now) == (4, 400)
        assert one.usage.seconds_until("acme", now, 4, None) == 40
    finally:
        await one.close()
        await two.close()
        await client.aclose()


async def _published_earlier(client: redis.Redis, replica: str, seconds: float) -> None:
    """Move ``replica``'s last publish ``seconds`` back, as if it had been silent so long
    (paused or killed) without the test waiting."""
    published_ms = await client.zscore(REPLICAS_KEY, replica)
    assert published_ms is not None
    await client.zadd(REPLICAS_KEY, {replica: published_ms - 1000 * seconds})


async def test_a_paused_replicas_spending_stays_counted_until_it_returns(
        redis_url: str) -> None:
    """A replica's usage expired with its in-flight counts, a second after its last sync: one
    paused 3 s (SIGSTOP, a VM pause, a long GC) lost its spending in the others' eyes, they
    admitted the tenant again, and once it was back the window held twice the limit. Its
    in-flight counts still go at once; its spending stays, whole (read fading evenly, the
    faded part was admitted again: 5 past a limit of 100 after 3 s)."""
    limit = 100
    paused = RedisStateStore(redis_url, "paused", sync_interval_s=60, ttl_s=0.2)
    other = RedisStateStore(redis_url, "other", sync_interval_s=60)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        await paused.start()
        await other.start()
        now = time.monotonic()
        paused.on_dispatch("w1", 10, 10)
        paused.usage.add("acme", now, requests=limit, tokens=5000)    # its whole budget
        await paused.sync_once()
        await other.sync_once()
        assert other.usage.totals("acme", now) == (limit, 5000)
        # paused: past its in-flight counts' time-to-live, and 3 s since it published
        await _in_flight_expired(redis_url, "paused")
        await _published_earlier(client, "paused", 3)
        admitted = 0
        for _ in range(20):               # the other replica's admissions meanwhile
            await other.sync_once()
            if other.usage.totals("acme", time.monotonic())[0] < limit:
                other.usage.add("acme", time.monotonic(), requests=1)
                admitted += 1
        assert other.inflight.get("w1").requests == 0      # gone, as a dead one's
        assert other.replicas == 2                         # still alive
        assert admitted == 0
        await paused.sync_once()          # resumed
        await other.sync_once()
        for store in (paused, other):
            assert store.usage.totals("acme", time.monotonic()) == (limit, 5000), \
                store.replica_id
    finally:
        await paused.close()
        await other.close()
        await client.aclose()


async def test_a_killed_replicas_spending_fades_out_of_the_window(redis_url: str) -> None:
    """Its in-flight counts expire within their time-to-live, as before; its spending (which
    expired with them) stays counted as what of it is still in the window, read from the
    schedule it last published, until it leaves."""
    dead = RedisStateStore(redis_url, "dead", sync_interval_s=60, ttl_s=1.0)
    alive = RedisStateStore(redis_url, "alive", sync_interval_s=60)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        await dead.start()
        await alive.start()
        now = time.monotonic()
        dead.on_dispatch("w1", 10, 10)
        dead.usage.add("acme", now - 40, requests=6, tokens=600)   # leaves in 20 s
        dead.usage.add("acme", now, requests=4, tokens=400)        # leaves in a minute
        await dead.sync_once()           # then never again, as if the process died
        await alive.sync_once()
        assert alive.inflight.get("w1").requests == 1
        assert alive.usage.totals("acme", now) == (10, 1000)
        await _in_flight_expired(redis_url, "dead")
        await alive.sync_once()
        assert alive.inflight.get("w1").requests == 0
        assert alive.usage.totals("acme", now) == (10, 1000)
        assert await client.exists("kvroute:inflight:dead") == 0
        assert await client.pttl("kvroute:usage:dead") > 55_000      # kept for the window
        # 35 s after its last publish, the 6 spent 40 s before it have left the window
        await _published_earlier(client, "dead", 35)
        await alive.sync_once()
        assert alive.usage.totals("acme", now) == (4, 400)
        assert alive.usage.remote_schedule["acme"] == ((4, 400), (4, 400), (0, 0), (0, 0),
                                                       (0, 0))
        # a minute after it, nothing: no longer a live replica
        await _published_earlier(client, "dead", 26)
        await alive.sync_once()
        assert alive.usage.totals("acme", now) == (0, 0)
        assert alive.replicas == 1
    finally:
        await alive.close()
        await dead.close()
        await client.aclose()


async def test_a_killed_replicas_spending_outlasts_its_restart_under_its_id(
        redis_url: str) -> None:
    """A process restarted under a killed one's replica id (a supervisor, a StatefulSet)
    replaced its predecessor's usage hash at its first sync, and its last minute with it:
    it is left as a stopped replica's, fading out of the window. A replica id another
    process still publishes under is not carried over (it would count twice)."""
    killed = RedisStateStore(redis_url, "r2", sync_interval_s=60, ttl_s=0.2)
    restarted = RedisStateStore(redis_url, "r2", sync_interval_s=60, ttl_s=0.2)
    alive = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        await killed.start()
        await alive.start()
        now = time.monotonic()
        killed.usage.add("acme", now, requests=10, tokens=1000)
        await killed.sync_once()            # then never again
        await asyncio.sleep(0.3)            # dead in the others' eyes (no in-flight counts)
        await restarted.start()
        restarted.usage.add("acme", now, requests=1, tokens=100)
        await restarted.sync_once()
        await alive.sync_once()
        requests, tokens = alive.usage.totals("acme", now)
        assert requests == 11 and 1090 <= tokens <= 1100, (requests, tokens)
        assert await client.zcard(LEFT_USAGE_KEY) == 1
        # r2 publishes: fresh within the twin's time-to-live (which judges it; 0.2 s was
        # outlived by the steps above on a loaded machine)
        twin = RedisStateStore(redis_url, "r2", sync_interval_s=60, ttl_s=30)
        await twin.start()
        await twin.close()
        assert await client.zcard(LEFT_USAGE_KEY) == 1   # (its own close leaves none)
    finally:
        await alive.close()
        await restarted.close()
        await killed.close()
        await client.aclose()


async def test_owners_recorded_while_redis_was_away_are_written_when_it_returns(
        restartable_redis: RestartableRedis) -> None:
    """A replica that made responses during an outage wrote none of their owners, so after it
    a follow-up reaching another replica was a 404 from a worker that never made them."""
    one = RedisStateStore(restartable_redis.url, "r1", sync_interval_s=60)
    two = RedisStateStore(restartable_redis.url, "r2", sync_interval_s=60)
    try:
        await one.start()
        await two.start()
        restartable_redis.stop()
        await _sync_until([one, two], degraded=True)
        await one.remember_response("resp_during", "w2")
        assert one.unsaved_owners == 1 and one.errors >= 1
        assert await one.response_owner("resp_during") == "w2"      # known here meanwhile

        restartable_redis.start_again()                  # empty
        await _sync_until([one, two], degraded=False)
        await _until(lambda: one.unsaved_owners == 0)
        assert await two.response_owner("resp_during") == "w2"
    finally:
        await one.close()
        await two.close()


async def test_recording_an_owner_does_not_wait_for_a_redis_that_does_not_answer() -> None:
    """The owner's write was awaited before each response was sent to its worker: a Redis
    that answered slowly delayed every creation by as much (up to the 1 s socket timeout)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make test installs it)")
    proc, port = start_redis(binary)
    store = RedisStateStore(f"redis://127.0.0.1:{port}/0", "r1", sync_interval_s=60)
    try:
        await store.start()
        os.kill(proc.pid, signal.SIGSTOP)       # up, but answering nothing
        started = time.monotonic()
        for n in range(5):
            await store.remember_response(f"resp_{n}", "w1")
        assert time.monotonic() - started < 0.5      # each awaited write would take 1 s
        assert await store.response_owner("resp_3") == "w1"
        await _until(lambda: store.degraded)    # the background write timed out
        os.kill(proc.pid, signal.SIGCONT)
        await _sync_until([store], degraded=False)
        await _until(lambda: store.unsaved_owners == 0)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        await store.close()
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


async def test_each_replica_counts_the_replicas_it_shares_state_with(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A replica on another database (a typo in --redis-url's /N) shares nothing and nothing
    said so: each one now tells how many replicas it sees, in the log and in a gauge."""
    from router.state_store_metrics import StateStoreCollector

    other_db = redis_url.rsplit("/", 1)[0] + "/5"
    one = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    two = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    apart = RedisStateStore(other_db, "r3", sync_interval_s=60)
    with caplog.at_level(logging.INFO, logger="router.state.redis_store"):
        for store in (one, two, apart):
            await store.start()
        try:
            await one.sync_once()
            assert (one.replicas, two.replicas, apart.replicas) == (2, 2, 1)
            samples = {(s.name, tuple(s.labels.values())): s.value
                       for m in StateStoreCollector(two).collect() for s in m.samples}
            assert 0.0 < samples.pop(("kvroute_state_store_sync_seconds", ())) < 1.0
            assert samples == {("kvroute_state_store_degraded", ()): 0.0,
                               ("kvroute_state_store_replicas", ()): 2.0,
                               ("kvroute_state_store_errors_total", ()): 0.0,
                               ("kvroute_state_store_unsaved_owners", ()): 0.0,
                               ("kvroute_state_store_routed_total", ("published",)): 0.0,
                               ("kvroute_state_store_routed_total", ("learnt",)): 0.0}
        finally:
            for store in (one, two, apart):
                await store.close()
    lines = [r.getMessage() for r in caplog.records]
    assert f"redis {redis_url}: 1 other replica(s) share state with this one: r1" in lines
    assert f"redis {other_db}: 0 other replica(s) share state with this one" in lines


async def test_a_redis_that_wants_a_password_is_said_to_refuse_not_to_be_unreachable(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    client = redis.Redis.from_url(redis_url)
    await client.config_set("requirepass", "s3cret")
    try:
        store = RedisStateStore(redis_url, "r1", sync_interval_s=60)
        with caplog.at_level(logging.WARNING, logger="router.state.redis_store"):
            await store.start()
        await store.close()
        assert store.degraded
        (line,) = [r.getMessage() for r in caplog.records]
        assert line.startswith(f"redis {redis_url} refused this replica: authentication (")
        assert "check the password in --redis-url" in line
    finally:
        await client.execute_command("AUTH", "s3cret")
        await client.config_set("requirepass", "")
        await client.aclose()


async def test_replicas_learn_what_the_others_routed_and_not_their_own(redis_url: str) -> None:
    from array import array

    one = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    two = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    learnt: dict[str, list[tuple[str, dict[int, list[int]]]]] = {"r1": [], "r2": []}
    one.follow_routed(lambda w, blocks: learnt["r1"].append(
        (w, {size: list(chain) for size, chain in blocks.items()})))
    two.follow_routed(lambda w, blocks: learnt["r2"].append(
        (w, {size: list(chain) for size, chain in blocks.items()})))
    await one.start()
    await two.start()           # each reads the stream from its start (empty here) on
    try:
        chain = array("Q", [2**64 - 1, 0, 12345678901234567890])
        one.on_routed_blocks("w1", {16: chain})
        one.on_routed_blocks("w2", {16: [], 32: [7]})      # an empty chain is not sent
        # published at once and read by a waiting reader: no sync needed (every 60 s here)
        await _until(lambda: len(learnt["r2"]) == 2, timeout_s=3.0)
        assert learnt["r2"] == [("w1", {16: list(chain)}), ("w2", {32: [7]})]
        await asyncio.sleep(0.2)
        assert learnt["r1"] == []                          # its own entries are skipped
        assert one.routed_shared == (2, 0) and two.routed_shared == (0, 2)
    finally:
        await one.close()
        await two.close()


async def test_a_replica_started_later_learns_the_routes_the_stream_keeps(
        redis_url: str) -> None:
    """A replica read the stream from its end when it started: restarted or added, it knew
    none of the routes the others had made, and every conversation under way left the
    worker caching it at its next turn through it. It reads what the stream keeps first."""
    one = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    late = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    learnt: list[tuple[str, list[int]]] = []
    late.follow_routed(lambda w, blocks: learnt.append((w, list(blocks[16]))))
    await one.start()
    try:
        for n in range(450):           # more than one read's count (200)
            one.on_routed_blocks(f"w{n % 3}", {16: [n + 1]})
        await _until(lambda: one.routed_shared[0] == 450)
        await late.start()
        await _until(lambda: len(learnt) == 450)
        assert learnt == [(f"w{n % 3}", [n + 1]) for n in range(450)]     # in order
        one.on_routed_blocks("w0", {16: [999]})          # and what follows, as before
        await _until(lambda: len(learnt) == 451)
        assert learnt[-1] == ("w0", [999])
    finally:
        await one.close()
        await late.close()


async def test_routes_sent_when_redis_returns_are_learnt_whoever_syncs_first(
        tmp_path: Path) -> None:
    """A replica whose Redis came back placed its reader at the stream's end: the routes the
    others queued meanwhile were learnt when they were appended before that, and skipped when
    after, as the syncs fell. The reader keeps its place now (a Redis that kept its data: the
    routes read before the outage are not read again either)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make test installs it)")
    restartable_redis = RestartableRedis(binary, options=("--dir", str(tmp_path)))
    one = RedisStateStore(restartable_redis.url, "r1", sync_interval_s=60)
    two = RedisStateStore(restartable_redis.url, "r2", sync_interval_s=60)
    learnt: list[list[int]] = []
    two.follow_routed(lambda w, blocks: learnt.append(list(blocks[16])))
    client = redis.Redis.from_url(restartable_redis.url)
    try:
        await one.start()
        await two.start()
        one.on_routed_blocks("w1", {16: [1]})
        await _until(lambda: learnt == [[1]])
        await client.execute_command("SAVE")          # kept across the restart
        await client.aclose()
        restartable_redis.stop()
        for n in range(3):
            one.on_routed_blocks("w1", {16: [n + 2]})
        await _sync_until([one, two], degraded=True)
        restartable_redis.start_again()
        await _sync_until([one], degraded=False)        # r1 first: it sends the three
        await _until(lambda: one.routed_shared[0] == 4)
        await _sync_until([two], degraded=False)        # r2 after them
        await _until(lambda: len(learnt) == 4)
        await asyncio.sleep(0.2)
        assert learnt == [[1], [2], [3], [4]]
    finally:
        await one.close()
        await two.close()
        restartable_redis.cleanup()


async def test_a_replaced_redis_whose_ids_are_behind_the_readers_place_is_read_again(
        restartable_redis: RestartableRedis) -> None:
    """A Redis replaced without its data, on a clock behind the one that numbered the entries
    read: the reader's place was past every new entry, and it learnt nothing, saying
    nothing. It is placed again when the stream ends before it."""
    from router.state.redis_store import encode_blocks

    one = RedisStateStore(restartable_redis.url, "r1", sync_interval_s=60)
    two = RedisStateStore(restartable_redis.url, "r2", sync_interval_s=60)
    learnt: list[list[int]] = []
    two.follow_routed(lambda w, blocks: learnt.append(list(blocks[16])))
    client = redis.Redis.from_url(restartable_redis.url)
    try:
        await one.start()
        await two.start()
        ahead = int(time.time() * 1000) + 60_000        # numbered by a clock a minute ahead
        await client.xadd("kvroute:routed", {"r": "r0", "i": "old", "w": "w1",
                                             "h": encode_blocks({16: [1]})}, id=f"{ahead}-0")
        await client.aclose()
        await _until(lambda: learnt == [[1]])
        restartable_redis.stop()
        await _sync_until([one, two], degraded=True)
        restartable_redis.start_again()                 # empty, on the host's own clock
        await _sync_until([one, two], degraded=False)
        for n in range(3):
            one.on_routed_blocks("w1", {16: [n + 2]})
        await _until(lambda: len(learnt) == 4)
        assert learnt == [[1], [2], [3], [4]]
    finally:
        await one.close()
        await two.close()


async def test_a_replica_starting_learns_the_last_stretch_of_routes_without_stalling(
        redis_url: str) -> None:
    """Routes older than the replay window tell of caches long turned over: not learnt at
    start. The recent ones are, yielding to the event loop as they go (200 routes of long
    prompts held it 0.4 s at a time, while the replica served)."""
    from router.state.redis_store import REPLAY_WINDOW_MS, encode_blocks

    client = redis.Redis.from_url(redis_url)
    now = int(time.time() * 1000)
    fields = {"r": "r0", "i": "other", "w": "w1"}
    await client.xadd("kvroute:routed", {**fields, "h": encode_blocks({16: [1]})},
                      id=f"{now - REPLAY_WINDOW_MS - 60_000}-0")
    for n in range(300):
        await client.xadd("kvroute:routed", {**fields, "h": encode_blocks({16: [n + 2]})},
                          id=f"{now - 1000}-{n}")
    await client.aclose()
    late = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    learnt: list[int] = []

    def slow_learn(worker: str, blocks: dict[int, list[int]]) -> None:
        time.sleep(0.001)                    # a long prompt's hashes, inserted
        learnt.append(blocks[16][0])

    late.follow_routed(slow_learn)
    # routes learnt between two turns of another task: counted, not timed (a loaded machine
    # stretches any gap on the loop, yielding or not)
    between: list[int] = []

    async def ticker() -> None:
        seen = 0
        while len(learnt) < 300:
            await asyncio.sleep(0.001)
            between.append(len(learnt) - seen)
            seen = len(learnt)

    try:
        ticking = asyncio.create_task(ticker())
        await late.start()
        await _until(lambda: len(learnt) == 300)
        await ticking
        assert learnt == [n + 2 for n in range(300)]     # the old one left out
        # a slice (2 ms) holds 2 or 3 of these 1 ms routes; 200 at once held the loop 0.2 s
        assert max(between) <= 20, between
    finally:
        await late.close()


def test_block_hashes_travel_as_text_and_back() -> None:
    from array import array

    from router.state.redis_store import decode_blocks, encode_blocks

    blocks = {16: array("Q", [1, 2**63, 2**64 - 1]), 64: [5, 6]}
    text = encode_blocks(blocks)
    assert text.isascii() and text.startswith("16:")
    assert {k: list(v) for k, v in decode_blocks(text).items()} == {
        16: [1, 2**63, 2**64 - 1], 64: [5, 6]}
    assert encode_blocks({16: []}) == ""
    for bad in ("16:not base64!", "x:AAAAAAAAAAA=", "16:AAAA"):
        with pytest.raises(ValueError):
            decode_blocks(bad)


async def test_a_host_named_like_auth_that_cannot_be_reached_is_said_unreachable(
        caplog: pytest.LogCaptureFixture) -> None:
    """Any error whose text held "auth" (a host oauth-cache...) was called a refused
    password."""
    store = RedisStateStore("redis://oauth-cache.invalid:1/0", "r1", sync_interval_s=60)
    with caplog.at_level(logging.WARNING, logger="router.state.redis_store"):
        await store.start()
    await store.close()
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("redis redis://oauth-cache.invalid:1/0 unreachable (")


async def test_routes_routed_while_redis_is_away_are_published_when_it_returns(
        restartable_redis: RestartableRedis) -> None:
    """A batch being sent could be pushed out of the queue by the routes arriving meanwhile
    and counted as published: a batch now leaves the queue before it is sent and goes back
    to it when the send fails."""
    store = RedisStateStore(restartable_redis.url, "r1", sync_interval_s=60)
    try:
        await store.start()
        restartable_redis.stop()
        for n in range(3):
            store.on_routed_blocks("w1", {16: [n + 1]})
        await _until(lambda: store.degraded)
        assert store.routed_shared == (0, 0) and len(store._routed_out) == 3
        restartable_redis.start_again()
        await _sync_until([store], degraded=False)
        await _until(lambda: store.routed_shared[0] == 3)
        client = redis.Redis.from_url(restartable_redis.url)
        try:
            assert await client.xlen("kvroute:routed") == 3
        finally:
            await client.aclose()
    finally:
        await store.close()


async def test_a_failed_batch_put_back_in_a_full_queue_leaves_the_oldest_out(
        sleepy_redis: str) -> None:
    """A batch whose send failed went back to the queue's front with ``extendleft``, which
    on a queue filled meanwhile dropped its other end: the newest routes (those of the
    conversations under way) were lost, and the oldest kept, where the queue's bound keeps
    the newest."""
    store = RedisStateStore(sleepy_redis, "r1", sync_interval_s=60)
    sleeper = redis.Redis.from_url(sleepy_redis)
    routes = [encode_blocks({16: [n + 1]}) for n in range(MAX_ROUTED_PENDING + ROUTED_SEND_COUNT)]
    try:
        await store.start()
        asleep = asyncio.create_task(sleeper.execute_command("DEBUG", "SLEEP", "1.5"))
        await asyncio.sleep(0.2)              # Redis busy past the store's 1 s socket timeout
        for n in range(MAX_ROUTED_PENDING):   # a full queue: its first batch is sent, and hangs
            store.on_routed_blocks("w1", {16: [n + 1]})
        await asyncio.sleep(0.2)
        assert len(store._routed_out) == MAX_ROUTED_PENDING - ROUTED_SEND_COUNT
        for n in range(MAX_ROUTED_PENDING, MAX_ROUTED_PENDING + ROUTED_SEND_COUNT):
            store.on_routed_blocks("w1", {16: [n + 1]})     # routed while the batch is out
        await _until(lambda: store.degraded)                # the send timed out: put back
        assert store.routed_shared == (0, 0)
        assert [encoded for _, encoded in store._routed_out] == routes[-MAX_ROUTED_PENDING:]
        await asleep
    finally:
        await store.close()
        await sleeper.aclose()


async def test_two_routers_of_one_replica_id_are_warned_and_still_learn_each_other(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Two replicas started without --replica-id both publish as router-0: they overwrote each
    other's counts, skipped each other's routes as their own, and said nothing."""
    one = RedisStateStore(redis_url, "router-0", sync_interval_s=60)
    two = RedisStateStore(redis_url, "router-0", sync_interval_s=60)
    learnt: list[str] = []
    two.follow_routed(lambda worker_id, blocks: learnt.append(worker_id))
    with caplog.at_level(logging.WARNING, logger="router.state.redis_store"):
        await one.start()
        await two.start()
        try:
            for _ in range(3):
                await one.sync_once()
                await two.sync_once()
            one.on_routed_blocks("w1", {16: [1, 2]})
            await _until(lambda: learnt == ["w1"], timeout_s=3.0)
        finally:
            await one.close()
            await two.close()
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings and all("another router publishes as replica 'router-0' too" in w
                            for w in warnings)
    assert len(warnings) <= 2                            # once per process


async def test_a_replica_that_stopped_publishing_is_not_counted(redis_url: str) -> None:
    from router.state.redis_store import REPLICA_ALIVE_MS

    client = redis.Redis.from_url(redis_url)
    now_ms = int(time.time() * 1000)
    await client.zadd(REPLICAS_KEY, {"killed": now_ms - REPLICA_ALIVE_MS - 5000,
                                     "alive": now_ms})
    await client.aclose()
    store = RedisStateStore(redis_url, "r1", sync_interval_s=60)
    try:
        await store.start()
        assert store.replicas == 2                       # itself and "alive"
    finally:
        await store.close()


async def test_a_read_cut_by_a_frozen_redis_does_not_set_the_store_aside(
        restartable_redis: RestartableRedis) -> None:
    """The routes reader waits 0.5 s on a 1 s socket timeout: a stall past the margin took
    the whole store off Redis (in-flight counts and budgets dropped)."""
    store = RedisStateStore(restartable_redis.url, "r1", sync_interval_s=60)
    pid = restartable_redis.procs[-1].pid
    try:
        await store.start()
        await asyncio.sleep(0.1)                         # the reader is waiting
        os.kill(pid, signal.SIGSTOP)
        await asyncio.sleep(1.6)                         # past the socket timeout
        os.kill(pid, signal.SIGCONT)
        await asyncio.sleep(0.3)
        assert not store.degraded
    finally:
        os.kill(pid, signal.SIGCONT)
        await store.close()


async def test_owners_are_not_read_from_a_redis_that_stopped_answering(
        restartable_redis: RestartableRedis) -> None:
    """Set aside because Redis does not answer: a follow-up of a response it does not know
    does not wait out a connection to it."""
    store = RedisStateStore(restartable_redis.url, "r1", sync_interval_s=60)
    pid = restartable_redis.procs[-1].pid
    try:
        await store.start()
        os.kill(pid, signal.SIGSTOP)
        await store.sync_once()                          # times out: set aside
        assert store.degraded
        asked = time.monotonic()
        assert await store.response_owner("resp_other") is None
        assert time.monotonic() - asked < 0.5            # (the socket timeout is 1 s)
    finally:
        os.kill(pid, signal.SIGCONT)
        await store.close()


@pytest.mark.parametrize("refusal", ["wrong type", "no permission"])
async def test_a_refused_routes_stream_leaves_the_store_sharing_and_is_logged_once(
        redis_url: str, caplog: pytest.LogCaptureFixture, refusal: str) -> None:
    """A user without XADD, or ``kvroute:routed`` holding another type: the store flipped
    between degraded and "reachable again" every sync, a log line each (20 a second)."""
    from array import array

    admin = redis.Redis.from_url(redis_url)
    url = redis_url
    if refusal == "wrong type":
        await admin.set("kvroute:routed", "x")
    else:
        await admin.execute_command("ACL", "SETUSER", "kvr", "on", ">kvrpw", "~*", "&*",
                                    "+@all", "-xadd")
        url = redis_url.replace("redis://", "redis://kvr:kvrpw@")
    store = RedisStateStore(url, "r1", sync_interval_s=0.02)
    try:
        with caplog.at_level(logging.INFO, logger="router.state.redis_store"):
            await store.start()
            for n in range(20):
                store.on_routed_blocks("w1", {16: array("Q", [n + 1])})
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)
        assert not store.degraded
        lines = [r.getMessage() for r in caplog.records]
        refused = [line for line in lines if "refused the routed prompts' stream" in line]
        assert len(refused) == 1, lines
        assert "WRONGTYPE" in refused[0] or "no permissions" in refused[0]
        assert "XADD" not in refused[0] and "16:" not in refused[0]     # no hashes
        assert not [line for line in lines if "reachable again" in line], lines
        assert store.routed_shared[0] == 0 and store.errors >= 1
    finally:
        await store.close()
        await admin.delete("kvroute:routed")
        if refusal == "no permission":
            await admin.execute_command("ACL", "DELUSER", "kvr")
        await admin.aclose()


async def _route_while_refused(store: RedisStateStore, seconds: float) -> None:
    """Route a new prompt every 20 ms for ``seconds``: each retry of the stream sends
    another batch."""
    from array import array

    n = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        n += 1
        store.on_routed_blocks("w1", {16: array("Q", [n * 7919 + 1, n])})
        await asyncio.sleep(0.02)


async def test_a_disabled_xadd_is_logged_once_without_the_prompts_hashes(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """``rename-command XADD ""``: Redis's "unknown command 'XADD', with args beginning with:
    …" quotes the batch's first entry, its encoded prompt hashes among them, so each retry's
    reason differed and was logged again (8 times in about 2 minutes), hashes and all."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make test installs it)")
    monkeypatch.setattr("router.state.redis_store.ROUTES_RETRY_S", 0.05)
    proc, port = start_redis(binary, options=["--rename-command", "XADD", ""])
    store = RedisStateStore(f"redis://127.0.0.1:{port}/0", "r1", sync_interval_s=0.02)
    try:
        with caplog.at_level(logging.INFO, logger="router.state.redis_store"):
            await store.start()
            await _route_while_refused(store, 1.0)
        assert not store.degraded
        assert store.errors >= 5                 # tried again and again
        lines = [r.getMessage() for r in caplog.records]
        refused = [line for line in lines if "refused the routed prompts' stream" in line]
        assert len(refused) == 1, refused
        assert "unknown command 'XADD'" in refused[0]
        assert "with args" not in refused[0] and "16:" not in refused[0], refused[0]
        assert "'h'" not in refused[0] and "'w1'" not in refused[0]
    finally:
        await store.close()
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


async def test_refusals_of_both_sides_of_the_stream_are_each_logged_once(
        redis_url: str, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A user without XADD nor XREAD: the publisher's refusal and the reader's took turns as
    the reason last logged, and each turn was logged again."""
    monkeypatch.setattr("router.state.redis_store.ROUTES_RETRY_S", 0.05)
    admin = redis.Redis.from_url(redis_url)
    await admin.execute_command("ACL", "SETUSER", "kvr", "on", ">kvrpw", "~*", "&*",
                                "+@all", "-xadd", "-xread")
    store = RedisStateStore(redis_url.replace("redis://", "redis://kvr:kvrpw@"), "r1",
                            sync_interval_s=0.02)
    try:
        with caplog.at_level(logging.INFO, logger="router.state.redis_store"):
            await store.start()
            await _route_while_refused(store, 1.0)
            assert not store.degraded
            lines = [r.getMessage() for r in caplog.records]
            refused = [line for line in lines if "refused the routed prompts' stream" in line]
            assert len(refused) == 2, refused
            assert {"'xadd'" in line for line in refused} == {True, False}
            assert not [line for line in lines if "shared again" in line], lines
            await admin.execute_command("ACL", "SETUSER", "kvr", "+xadd")
            await _route_while_refused(store, 0.5)        # the reader is still refused
            assert store.routed_shared[0] > 0
            await admin.execute_command("ACL", "SETUSER", "kvr", "+xread")
            await _route_while_refused(store, 0.5)
        lines = [r.getMessage() for r in caplog.records]
        assert len([line for line in lines if "refused the routed" in line]) == 2, lines
        assert len([line for line in lines if "routed prompts shared again" in line]) == 1
    finally:
        await store.close()
        await admin.execute_command("ACL", "DELUSER", "kvr")
        await admin.aclose()


@pytest.mark.parametrize("text", [
    "unknown command 'XADD', with args beginning with: 'kvroute:routed' 'h' '16:aVMV7q2T' ",
    "unknown command `XADD`, with args beginning with: `kvroute:routed`, `h`, `16:aVMV7q2T`, ",
    "Command # 1 (XADD kvroute:routed MAXLEN ~ 5000 * h 16:aVMV7q2T) of pipeline caused "
    "error: unknown command 'XADD', with args beginning with: 'h' '16:aVMV7q2T' ",
])
def test_a_refusal_is_logged_without_the_commands_arguments(text: str) -> None:
    from redis.exceptions import ResponseError

    from router.state.redis_store import _refusal

    assert _refusal(ResponseError(text)).replace("`", "'") == "unknown command 'XADD'"


async def test_counts_outlive_the_syncs_of_a_slow_redis(redis_url: str) -> None:
    """Published for 1 s, the counts lapsed between two publishes once a sync took about half
    a second, and the other replicas saw none, without a command failing."""
    store = RedisStateStore(redis_url, "r1", sync_interval_s=60, ttl_s=1.0)
    admin = redis.Redis.from_url(redis_url)
    try:
        await store.start()
        store.on_dispatch("w1", 100, 10)
        assert store.sync_seconds > 0
        store.sync_seconds = 2.0              # as a Redis answering in a second each way
        await store.sync_once()
        assert 0 < store.sync_seconds < 1.0
        assert await admin.pttl("kvroute:inflight:r1") > 7_000     # 4 syncs of 2 s
        await store.sync_once()
        assert await admin.pttl("kvroute:inflight:r1") <= 1_000    # back to 1 s
    finally:
        await store.close()
        await admin.aclose()


class _DelayingProxy:
    """A TCP proxy on 127.0.0.1 that holds every chunk ``delay_s`` before passing it on, each
    way (a Redis that far away), and counts the connections it takes."""

    def __init__(self, target_port: int, delay_s: float) -> None:
        self.target_port, self.delay_s, self.connections = target_port, delay_s, 0
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accepted, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    async def _accepted(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.create_task(self._pump(source, sink))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while chunk := await source.read(65536):
                await asyncio.sleep(self.delay_s)
                sink.write(chunk)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.close()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        await self._server.wait_closed()


async def test_an_idle_reader_keeps_its_connection_on_a_slow_redis(redis_url: str) -> None:
    """Half a second a round trip: the routes reader's wait (0.5 s) and its round trip passed
    the 1 s socket timeout at every idle read, whose connection was then dropped, and each
    sync after it connected again. The read now waits less on a slow Redis; what another
    replica routes is still learnt."""
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    proxy = _DelayingProxy(port, 0.25)
    slow_url = await proxy.start()
    store = RedisStateStore(slow_url, "r1", sync_interval_s=0.5)
    other = RedisStateStore(redis_url, "r2", sync_interval_s=60)
    learnt: list[str] = []
    store.follow_routed(lambda worker_id, blocks: learnt.append(worker_id))
    try:
        await store.start()
        await other.start()
        await asyncio.sleep(1.0)              # the reader placed, the pool's connections made
        connected = proxy.connections
        await asyncio.sleep(4.0)              # idle: syncs, and reads that find nothing
        assert proxy.connections == connected, "connections dropped and made again"
        assert store.errors == 0 and not store.degraded
        other.on_routed_blocks("w2", {16: [7, 8]})
        await _until(lambda: learnt == ["w2"])
    finally:
        await store.close()
        await other.close()
        await proxy.close()


async def test_a_new_cause_while_redis_is_away_is_logged(
        restartable_redis: RestartableRedis, caplog: pytest.LogCaptureFixture) -> None:
    """Stopped, then back with a password: the log still said "connection refused"."""
    store = RedisStateStore(restartable_redis.url, "r1", sync_interval_s=60)
    await store.start()
    try:
        restartable_redis.stop()
        with caplog.at_level(logging.WARNING, logger="router.state.redis_store"):
            await store.sync_once()
            restartable_redis.start_again()
            admin = redis.Redis.from_url(restartable_redis.url)
            await admin.config_set("requirepass", "s3cret")
            await admin.aclose()
            await store.sync_once()
            await store.sync_once()
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 2, lines
        assert "unreachable" in lines[0] and "routing on local state" in lines[0]
        assert "still away, now refused this replica: authentication" in lines[1]
    finally:
        await store.close()


def _clock_off_by(seconds: float) -> Callable[[], float]:
    """A wall clock ``seconds`` ahead of this host's (behind when negative)."""
    return lambda: time.time() + seconds


async def test_replicas_whose_clocks_disagree_still_share_state(redis_url: str) -> None:
    """Each replica timed its liveness on its own wall clock: one 2 min behind was taken
    for dead by the others (a tenant got its budget from it as well), and one 12 min ahead
    removed everyone else from the replicas' set at each sync."""
    stores = [RedisStateStore(redis_url, "on-time", sync_interval_s=60),
              RedisStateStore(redis_url, "ahead", sync_interval_s=60,
                              wall_clock=_clock_off_by(720)),
              RedisStateStore(redis_url, "behind", sync_interval_s=60,
                              wall_clock=_clock_off_by(-120))]
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        now = time.monotonic()
        for store in stores:
            await store.start()
            store.on_dispatch("w1", 10, 1)
            store.usage.add("acme", now, requests=1, tokens=100)
        for _ in range(2):
            for store in stores:
                await store.sync_once()
        assert sorted(await client.zrange(REPLICAS_KEY, 0, -1)) == ["ahead", "behind",
                                                                    "on-time"]
        for store in stores:
            assert store.replicas == 3, store.replica_id
            assert store.inflight.get("w1").requests == 3, store.replica_id
            assert store.usage.totals("acme", now) == (3, 300), store.replica_id
    finally:
        for store in stores:
            await store.close()
        await client.aclose()


async def test_a_stopped_replicas_spending_is_counted_whatever_the_clocks(
        redis_url: str) -> None:
    """The end of a stopped replica's spending was written on its clock and read on each
    reader's: 90 s behind, it was dropped at once; a reader 30 s ahead counted half."""
    stopping = RedisStateStore(redis_url, "stopping", sync_interval_s=60,
                               wall_clock=_clock_off_by(-90))
    readers = [RedisStateStore(redis_url, "on-time", sync_interval_s=60),
               RedisStateStore(redis_url, "ahead", sync_interval_s=60,
                               wall_clock=_clock_off_by(30))]
    try:
        await stopping.start()
        for reader in readers:
            await reader.start()
        now = time.monotonic()
        stopping.usage.add("acme", now, requests=10, tokens=1000)
        await stopping.close()
        for reader in readers:
            await reader.sync_once()
            assert reader.usage.totals("acme", now) == (10, 1000), reader.replica_id
            assert reader.usage.remote_schedule["acme"] == ((10, 1000),) * 5
    finally:
        await stopping.close()
        for reader in readers:
            await reader.close()


async def test_a_clock_off_redis_time_is_logged_once(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    off = RedisStateStore(redis_url, "off", sync_interval_s=60, wall_clock=_clock_off_by(-42))
    on_time = RedisStateStore(redis_url, "on-time", sync_interval_s=60)
    with caplog.at_level(logging.WARNING, logger="router.state.redis_store"):
        try:
            for store in (off, on_time):
                await store.start()
            for _ in range(3):
                await off.sync_once()
                await on_time.sync_once()
        finally:
            await off.close()
            await on_time.close()
    (line,) = [r.getMessage() for r in caplog.records]
    assert "replica off: this host's clock is 42 s behind Redis's" in line, line
    assert "NTP" in line


async def test_deployments_under_other_key_prefixes_share_nothing_in_one_database(
        redis_url: str) -> None:
    """Every key was under ``kvroute:``: two deployments on one Redis database (a managed
    Redis offering DB 0 only) merged their budgets, in-flight counts, replicas, routing
    history and response owners."""
    from array import array

    a1 = RedisStateStore(redis_url, "r1", sync_interval_s=60, key_prefix="team-a:")
    a2 = RedisStateStore(redis_url, "r2", sync_interval_s=60, key_prefix="team-a:")
    b1 = RedisStateStore(redis_url, "r1", sync_interval_s=60, key_prefix="team-b:")
    learnt: dict[str, list[str]] = {"a2": [], "b1": []}
    a2.follow_routed(lambda worker, blocks: learnt["a2"].append(worker))
    b1.follow_routed(lambda worker, blocks: learnt["b1"].append(worker))
    admin = redis.Redis.from_url(redis_url, decode_responses=True)
    stores = (a1, a2, b1)
    try:
        for store in stores:
            await store.start()
        key = "acme"
        a1.on_dispatch("w1", 10, 1)
        a1.usage.add(key, time.monotonic(), requests=1, tokens=100)
        await a1.remember_response("resp_a", "w1")
        a1.on_routed_blocks("w1", {16: array("Q", [3])})
        await _until(lambda: a1.unsaved_owners == 0 and a1.routed_shared[0] == 1)
        for store in (*stores, a1):
            await store.sync_once()
        assert (a1.replicas, a2.replicas, b1.replicas) == (2, 2, 1)
        assert a2.inflight.get("w1").requests == 1 and b1.inflight.get("w1").requests == 0
        assert a2.usage.remote.get(key) and not b1.usage.remote
        assert await a2.response_owner("resp_a") == "w1"
        assert await b1.response_owner("resp_a") is None
        await _until(lambda: learnt["a2"] == ["w1"])
        await asyncio.sleep(0.2)
        assert learnt["b1"] == []
        # every key the stores wrote is under its prefix
        names = await admin.keys("*")
        assert names and all(name.startswith(("team-a:", "team-b:")) for name in names), names
        assert "team-b:inflight:r1" not in names        # b1 dispatched nothing
        assert {"team-a:replicas", "team-b:replicas", "team-a:routed",
                "team-a:response:resp_a", "team-a:inflight:r1", "team-a:usage:r1"} <= set(names)
        await b1.close()                    # its withdrawal leaves team-a's records be
        await a2.sync_once()
        assert a2.replicas == 2 and a2.inflight.get("w1").requests == 1
    finally:
        for store in stores:
            await store.close()
        await admin.aclose()


@pytest.mark.parametrize("prefix", ["", "team a:", "team\ta:", "x" * 65, "équipe:"])
def test_a_key_prefix_redis_cannot_name_cleanly_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match=r"^redis_key_prefix: must "):
        RedisStateStore("redis://127.0.0.1:1/0", "r1", key_prefix=prefix)


@pytest.mark.parametrize(("exc", "reads"), [
    (redis_exceptions.OutOfMemoryError(
        "command not allowed when used memory > 'maxmemory'."), True),
    (redis_exceptions.ReadOnlyError("You can't write against a read only replica."), True),
    (redis_exceptions.ResponseError("MISCONF Redis is configured to save RDB snapshots"), True),
    (redis_exceptions.ResponseError("MASTERDOWN Link with MASTER is down"), False),
    (redis_exceptions.NoPermissionError("this user has no permissions"), False),
    (redis_exceptions.ResponseError("BUSY Redis is busy running a script"), False),
    (redis_exceptions.AuthenticationError("invalid password"), False),
    (redis_exceptions.ConnectionError("Connection refused"), False),
    (redis_exceptions.TimeoutError("Timeout reading from socket"), False)])
def test_only_refusals_known_to_leave_reads_working_let_owners_be_read(
        exc: Exception, reads: bool) -> None:
    """A refusal that may refuse reads too would make each follow-up pay a failing read."""
    assert _only_refused(exc) is reads
