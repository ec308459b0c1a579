"""KV-cache events in vLLM's wire format: ZMQ PUB ``[topic, seq, msgpack batch]``.

One batch per engine step that produced events, ``seq`` an 8-byte big-endian counter from 0.
A batch is the msgpack array ``[ts, events, data_parallel_rank]``; each event is a map with a
``type`` key (v0.33, the default) or a tagged array (earlier releases, ``encoding: array``).
An optional ROUTER socket answers replay requests as vLLM's ``ZmqEventPublisher`` does: a
request is a REQ socket's envelope, ``[b"", start]`` (8-byte big-endian start seq; a ROUTER
reads ``[identity, b"", start]``), and anything else is logged and dropped; the answer is
``[b"", topic, seq, payload]`` per buffered batch from ``start``, then the end marker
``[b"", b"", seq -1, b""]`` (an empty topic).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import msgpack
import zmq
import zmq.asyncio

from workers.emulator.config import KvEventsConfig
from workers.engine.api import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from workers.task_cancel import cancel_and_wait

END_OF_REPLAY = (2**64 - 1).to_bytes(8, "big")

log = logging.getLogger(__name__)


def encode_event(event: KVEvent, encoding: str) -> Any:
    """One event as vLLM's msgspec encoder writes it (``omit_defaults`` for optional fields)."""
    if isinstance(event, BlockStored):
        if encoding == "array":
            fields: list[Any] = ["BlockStored", list(event.block_hashes), event.parent_block_hash,
                                 list(event.token_ids), event.block_size, event.lora_id,
                                 event.medium]
            if event.lora_name is not None:
                fields.append(event.lora_name)
            return fields
        stored: dict[str, Any] = {
            "type": "BlockStored", "block_hashes": list(event.block_hashes),
            "parent_block_hash": event.parent_block_hash, "token_ids": list(event.token_ids),
            "block_size": event.block_size, "lora_id": event.lora_id, "medium": event.medium,
            "lora_name": event.lora_name}
        if event.extra_keys is not None:      # a list of Nones too: only None is a default
            stored["extra_keys"] = [None if keys is None else list(keys)
                                    for keys in event.extra_keys]
        return {**stored, "group_idx": 0, "kv_cache_spec_kind": "full_attention"}
    if isinstance(event, BlockRemoved):
        if encoding == "array":
            return ["BlockRemoved", list(event.block_hashes), event.medium]
        return {"type": "BlockRemoved", "block_hashes": list(event.block_hashes),
                "medium": event.medium, "group_idx": 0}
    if isinstance(event, AllBlocksCleared):
        return ["AllBlocksCleared"] if encoding == "array" else {"type": "AllBlocksCleared"}
    raise TypeError(f"not a KV event: {event!r}")


def encode_batch(events: Sequence[KVEvent], encoding: str, ts: float | None = None) -> bytes:
    payload = [time.time() if ts is None else ts,
               [encode_event(e, encoding) for e in events], 0]
    return msgpack.packb(payload, use_bin_type=True)  # type: ignore[no-any-return]


class KvEventPublisher:
    """Publishes event batches; owns its ZMQ context and sockets."""

    def __init__(self, config: KvEventsConfig) -> None:
        self.config = config
        self._ctx = zmq.asyncio.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.SNDHWM, 100000)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.setsockopt(zmq.IPV6, 1)       # so that tcp://[::1]:P can be bound
        self._topic = config.topic.encode()
        self._seq = 0
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._replay: zmq.asyncio.Socket | None = None
        self._replay_task: asyncio.Task[None] | None = None
        try:
            _bind_or_connect(self._pub, config.endpoint)
            if config.replay_endpoint:
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.setsockopt(zmq.LINGER, 0)
                self._replay.setsockopt(zmq.IPV6, 1)
                _bind_or_connect(self._replay, config.replay_endpoint)
        except OSError:
            # (a context left with open sockets blocks whoever collects it, for good)
            self._pub.close(linger=0)
            if self._replay is not None:
                self._replay.close(linger=0)
            self._ctx.term()
            raise
        if self._replay is not None:
            self._replay_task = asyncio.get_running_loop().create_task(self._serve_replay())

    @property
    def endpoint(self) -> str:
        """The bound endpoint (resolves a ``:0`` port)."""
        return str(self._pub.getsockopt_string(zmq.LAST_ENDPOINT))

    def publish(self, events: Sequence[KVEvent]) -> None:
        if not events:
            return
        payload = encode_batch(events, self.config.encoding)
        seq = self._seq
        self._seq += 1
        self._buffer.append((seq, payload))
        with contextlib.suppress(zmq.Again):
            # A full send queue drops the batch, as a PUB socket at its high-water mark does.
            self._pub.send_multipart([self._topic, seq.to_bytes(8, "big"), payload],
                                     flags=zmq.NOBLOCK)

    async def _serve_replay(self) -> None:
        assert self._replay is not None
        while True:
            frames = await self._replay.recv_multipart()
            if len(frames) != 3:          # vLLM answers nothing else (no delimiter: 2 frames)
                log.warning("Invalid replay request: %s", frames)
                continue
            identity, _, start_frame = frames
            start = int.from_bytes(start_frame, "big")
            for seq, payload in list(self._buffer):
                if seq >= start:
                    await self._replay.send_multipart(
                        [identity, b"", self._topic, seq.to_bytes(8, "big"), payload])
            await self._replay.send_multipart([identity, b"", b"", END_OF_REPLAY, b""])

    async def close(self) -> None:
        if self._replay_task is not None:
            await cancel_and_wait(self._replay_task)
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)
        self._ctx.term()


def _bind_or_connect(socket: zmq.asyncio.Socket, endpoint: str) -> None:
    """vLLM's rule: endpoints with ``*``, ``::``, ``ipc://`` or ``inproc://`` are bound, others
    connected — except that a loopback/explicit-address tcp endpoint is bound too, since the
    emulator is always the publishing side."""
    try:
        if endpoint.startswith("tcp://") and not any(x in endpoint for x in ("*", "::")):
            host = endpoint[len("tcp://"):].rsplit(":", 1)[0]
            if host not in ("127.0.0.1", "0.0.0.0", "localhost"):
                socket.connect(endpoint)
                return
        socket.bind(endpoint)
    except zmq.ZMQError as exc:     # a taken port: one line, as the HTTP port's, not a traceback
        reason = str(exc.strerror).split(" (addr=")[0]
        raise OSError(f"KV events endpoint {endpoint}: {reason}") from None
