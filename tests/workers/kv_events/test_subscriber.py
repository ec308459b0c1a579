"""The subscriber over real ZMQ sockets on 127.0.0.1: live stream, gap, replay."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import msgpack
import pytest
import zmq
import zmq.asyncio

from workers.emulator.config import KvEventsConfig
from workers.emulator.kv_events import KvEventPublisher
from workers.engine.api import BlockStored
from workers.engine.block_hash import block_hash_chain, to_event_int
from workers.kv_events import ExactPrefixIndex, KvEventSource, KvEventSubscriber
from workers.kv_events.decode import decode_batch

TOPIC = b"kv-events"


def stored_payload(hashes: list[int]) -> bytes:
    payload: bytes = msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": hashes,
                                           "parent_block_hash": None, "token_ids": [],
                                           "block_size": 16, "medium": "GPU"}], 0])
    return payload


# generous bounds: a slow or busy machine must not fail these, a broken subscriber still does
async def wait_until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


async def publish_until_seen(pub: zmq.asyncio.Socket, index: ExactPrefixIndex,
                             seq: int, payload: bytes) -> None:
    """PUB drops messages until the subscription propagates: resend seq 0 until applied."""
    async with asyncio.timeout(30.0):
        while index.state("w").last_seq is None:
            await pub.send_multipart([TOPIC, seq.to_bytes(8, "big"), payload])
            await asyncio.sleep(0.02)


@pytest.mark.integration
async def test_live_stream_gap_and_replay_over_zmq() -> None:
    context = zmq.asyncio.Context()
    pub = context.socket(zmq.PUB)
    replay = context.socket(zmq.ROUTER)
    pub_port = pub.bind_to_random_port("tcp://127.0.0.1")
    replay_port = replay.bind_to_random_port("tcp://127.0.0.1")
    chain = [to_event_int(h) for h in block_hash_chain(list(range(64)), 16)]
    buffered = {seq: stored_payload([chain[seq]]) for seq in range(4)}
    index = ExactPrefixIndex()
    source = KvEventSource("w", f"tcp://127.0.0.1:{pub_port}",
                           replay_endpoint=f"tcp://127.0.0.1:{replay_port}",
                           topic=TOPIC.decode())
    subscriber = KvEventSubscriber(index, [source])

    async def serve_replay() -> None:
        """vLLM's ``ZmqEventPublisher._service_replay`` (vllm/distributed/kv_events.py,
        v0.32-v0.33): a request of any shape but ``[identity, b"", start]`` is dropped."""
        frame = await replay.recv_multipart()
        assert len(frame) == 3, f"vLLM drops this replay request unanswered: {frame}"
        client_id, _, start_seq_bytes = frame
        for seq in range(int.from_bytes(start_seq_bytes, "big"), 4):
            await replay.send_multipart([client_id, b"", TOPIC, seq.to_bytes(8, "big"),
                                         buffered[seq]])
        await replay.send_multipart([client_id, b"", b"", b"\xff" * 8, b""])

    try:
        await subscriber.start()
        await publish_until_seen(pub, index, 0, buffered[0])
        assert index.is_exact("w") and index.match("w", chain) == 1
        server = asyncio.create_task(serve_replay())
        await pub.send_multipart([TOPIC, (3).to_bytes(8, "big"), buffered[3]])   # 1, 2 lost
        await wait_until(lambda: index.state("w").last_seq == 3)
        async with asyncio.timeout(30.0):    # a lost replay request fails here, not at 300 s
            await server
        assert index.is_exact("w")
        assert index.match("w", chain) == 4
        assert subscriber.counters["w"].replays == 1
        assert subscriber.counters["w"].replayed_batches == 3
    finally:
        await subscriber.stop()
        pub.close(linger=0)
        replay.close(linger=0)
        context.term()


@pytest.mark.integration
async def test_gap_without_replay_endpoint_marks_worker_inexact() -> None:
    context = zmq.asyncio.Context()
    pub = context.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    index = ExactPrefixIndex()
    subscriber = KvEventSubscriber(index, [KvEventSource("w", f"tcp://127.0.0.1:{port}")])
    try:
        await subscriber.start()
        await publish_until_seen(pub, index, 0, stored_payload([11]))
        await pub.send_multipart([b"", (2).to_bytes(8, "big"), stored_payload([12])])
        await pub.send_multipart([b"", (3).to_bytes(8, "big"), b"\xc1not msgpack"])
        await wait_until(lambda: index.state("w").last_seq == 3)
        assert not index.is_exact("w") and index.match("w", [11]) is None
        assert index.holds("w", 12)
        assert subscriber.counters["w"].decode_errors == 1
    finally:
        await subscriber.stop()
        pub.close(linger=0)
        context.term()


async def test_stop_while_a_replay_is_ending_still_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel that lands as the replay completes must end the task, not be swallowed
    (``asyncio.wait_for`` on 3.11 returned the replay's result instead, so ``stop()`` then
    waited forever on a task still reading its stream)."""
    index = ExactPrefixIndex()
    source = KvEventSource("w", "tcp://127.0.0.1:9", replay_endpoint="tcp://127.0.0.1:9")
    subscriber = KvEventSubscriber(index, [source])
    index.on_batch("w", 0, decode_batch(stored_payload([1])))
    release = asyncio.Event()
    entered = asyncio.Event()

    async def replay_until_released(_source: KvEventSource, _start: int) -> None:
        entered.set()
        await release.wait()

    monkeypatch.setattr(subscriber, "_replay", replay_until_released)
    taking = asyncio.create_task(subscriber._take(source, (2).to_bytes(8, "big"),
                                                  stored_payload([3]), replaying=False))
    await entered.wait()
    release.set()          # the replay finishes in the same loop iteration ...
    taking.cancel()        # ... as the subscriber is stopped
    async with asyncio.timeout(5.0):
        with pytest.raises(asyncio.CancelledError):
            await taking


@pytest.mark.integration
async def test_a_router_joining_a_running_engine_without_replay_is_exact_from_there() -> None:
    """The engine had published seq 0..6 before the router subscribed, and has no replay
    endpoint: the worker was inexact for good (a router restart or a replica added)."""
    context = zmq.asyncio.Context()
    pub = context.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    index = ExactPrefixIndex()
    subscriber = KvEventSubscriber(index, [KvEventSource("w", f"tcp://127.0.0.1:{port}")])
    try:
        await subscriber.start()
        async with asyncio.timeout(30.0):        # resend 7 until the subscription is up
            while index.state("w").batches == 0:
                await pub.send_multipart([TOPIC, (7).to_bytes(8, "big"),
                                          stored_payload([21])])
                await asyncio.sleep(0.02)
        await pub.send_multipart([TOPIC, (8).to_bytes(8, "big"), stored_payload([22])])
        await wait_until(lambda: index.state("w").last_seq == 8)
        assert index.is_exact("w") and index.match("w", [21, 22]) == 2
    finally:
        await subscriber.stop()
        pub.close(linger=0)
        context.term()


@pytest.mark.integration
async def test_follow_adds_and_drops_streams_and_leaves_the_others_undisturbed() -> None:
    """A reloaded fleet file names one more stream, then drops the first."""
    context = zmq.asyncio.Context()
    first, second = context.socket(zmq.PUB), context.socket(zmq.PUB)
    first_port = first.bind_to_random_port("tcp://127.0.0.1")
    second_port = second.bind_to_random_port("tcp://127.0.0.1")
    index = ExactPrefixIndex()
    w = KvEventSource("w", f"tcp://127.0.0.1:{first_port}")
    v = KvEventSource("v", f"tcp://127.0.0.1:{second_port}")
    subscriber = KvEventSubscriber(index, [w])

    async def seen(pub: zmq.asyncio.Socket, worker: str, seq: int, block: int) -> None:
        async with asyncio.timeout(30.0):
            while not index.holds(worker, block):
                await pub.send_multipart([b"", seq.to_bytes(8, "big"), stored_payload([block])])
                await asyncio.sleep(0.02)

    try:
        await subscriber.start()
        await seen(first, "w", 0, 11)
        w_task = subscriber._tasks["w"][1]
        await subscriber.follow([w, v])
        assert subscriber._tasks["w"][1] is w_task and not w_task.done()
        await seen(second, "v", 0, 21)
        await seen(first, "w", 1, 12)
        await subscriber.follow([v])
        assert w_task.done() and set(subscriber._tasks) == {"v"}
        assert [s.worker_id for s in subscriber.sources] == ["v"]
        for _ in range(10):                       # nobody reads the first stream now
            await first.send_multipart([b"", (2).to_bytes(8, "big"), stored_payload([13])])
            await asyncio.sleep(0.02)
        await seen(second, "v", 1, 22)
        assert not index.holds("w", 13) and index.state("w").last_seq == 1
    finally:
        await subscriber.stop()
        first.close(linger=0)
        second.close(linger=0)
        context.term()


@pytest.mark.integration
async def test_an_endpoint_zmq_cannot_take_neither_hangs_follow_nor_fails_stop(
        caplog: pytest.LogCaptureFixture) -> None:
    """The connect raised inside the stream's task before it said it was connected: the
    caller of ``follow`` (a fleet reload) waited for ever, and ``stop`` raised."""
    import logging

    index = ExactPrefixIndex()
    subscriber = KvEventSubscriber(index, [])
    await subscriber.start()
    try:
        with caplog.at_level(logging.ERROR, logger="workers.kv_events.subscriber"):
            async with asyncio.timeout(10.0):
                await subscriber.follow([KvEventSource("w", "10.0.0.7:5557")])
        assert "cannot follow w at 10.0.0.7:5557" in caplog.text
    finally:
        await subscriber.stop()


def free_ipv6_port(taken: tuple[int, ...] = ()) -> int:
    """A port free on ::1, from 45000-45999."""
    for port in range(45000, 46000):
        if port in taken:
            continue
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("::1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port on ::1 in 45000-45999")


@pytest.mark.integration
async def test_events_over_ipv6_reach_the_subscriber_live_and_replayed() -> None:
    """The emulator's publisher bound on tcp://[::1]:P and the subscriber following it: ZMQ
    sockets without the IPV6 option neither bind nor connect there, and nothing arrived."""
    pub_port = free_ipv6_port()
    replay_port = free_ipv6_port((pub_port,))
    chain = [to_event_int(h) for h in block_hash_chain(list(range(64)), 16)]
    publisher = KvEventPublisher(KvEventsConfig(
        endpoint=f"tcp://[::1]:{pub_port}", replay_endpoint=f"tcp://[::1]:{replay_port}",
        topic=TOPIC.decode()))
    index = ExactPrefixIndex()
    subscriber = KvEventSubscriber(index, [KvEventSource(
        "w", f"tcp://[::1]:{pub_port}", replay_endpoint=f"tcp://[::1]:{replay_port}",
        topic=TOPIC.decode())])

    def stored(n: int) -> list[BlockStored]:
        return [BlockStored(block_hashes=(chain[n],), parent_block_hash=None,
                            token_ids=(), block_size=16)]

    try:
        publisher.publish(stored(0))      # before anyone subscribed: only replay brings it
        await subscriber.start()
        async with asyncio.timeout(30.0):
            n = 1
            while index.state("w").last_seq is None or index.state("w").gap_open:
                publisher.publish(stored(min(n, 3)))
                n += 1
                await asyncio.sleep(0.02)
        assert index.match("w", chain) >= 2        # batch 0 came by replay, then the live ones
        assert subscriber.counters["w"].replays == 1
    finally:
        await subscriber.stop()
        await publisher.close()
