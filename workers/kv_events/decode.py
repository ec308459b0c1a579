"""Decode one vLLM KV-event payload (msgpack ``KVEventBatch``) into engine event objects.

The outer batch is an array ``[ts, events, data_parallel_rank]`` (rank missing in old
releases). Each event is either a map with a ``"type"`` key (vLLM ≥ v0.26) or a tagged array
``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
lora_name, extra_keys, …]`` with trailing defaults omitted (older releases); see
``vllm-interface.md`` §3.3. Block hashes arrive as uint64
(``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``, the default) or as raw hash bytes;
both become the lower-64-bit integer the index keys on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from workers.engine.api import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from workers.engine.block_hash import to_event_int

_STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                  "medium", "lora_name", "extra_keys")
_REMOVED_FIELDS = ("block_hashes", "medium")


class KvEventDecodeError(ValueError):
    """A payload that is not a KV-event batch; the message says what was wrong."""


@dataclass(frozen=True, slots=True)
class KvEventBatch:
    ts: float
    events: tuple[KVEvent, ...]
    data_parallel_rank: int | None = None


def decode_batch(payload: bytes) -> KvEventBatch:
    """Decode a msgpack batch in either encoding; raises ``KvEventDecodeError``."""
    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise KvEventDecodeError(f"payload is not msgpack: {exc}") from exc
    if isinstance(raw, Mapping):
        ts, events, rank = raw.get("ts"), raw.get("events"), raw.get("data_parallel_rank")
    elif isinstance(raw, list | tuple) and len(raw) >= 2:
        ts, events = raw[0], raw[1]
        rank = raw[2] if len(raw) > 2 else None
    else:
        raise KvEventDecodeError("batch must be an array [ts, events, rank] or a map")
    if not isinstance(ts, int | float) or not isinstance(events, list | tuple):
        raise KvEventDecodeError("batch must start with a number ts and a list of events")
    decoded = tuple(decode_event(event, i) for i, event in enumerate(events))
    return KvEventBatch(ts=float(ts), events=decoded,
                        data_parallel_rank=rank if isinstance(rank, int) else None)


def decode_event(event: Any, position: int = 0) -> KVEvent:
    """One event, map or tagged array."""
    if isinstance(event, Mapping):
        kind = event.get("type")
        fields: Mapping[str, Any] = event
    elif isinstance(event, list | tuple) and event and isinstance(event[0], str):
        kind = event[0]
        names = _STORED_FIELDS if kind == "BlockStored" else _REMOVED_FIELDS
        fields = dict(zip(names, event[1:], strict=False))
    else:
        raise KvEventDecodeError(f"events[{position}]: expected a map or a tagged array")
    if kind == "BlockStored":
        return BlockStored(
            block_hashes=_hashes(fields.get("block_hashes"), position),
            parent_block_hash=_optional_hash(fields.get("parent_block_hash"), position),
            token_ids=tuple(int(t) for t in fields.get("token_ids") or ()),
            block_size=int(fields.get("block_size") or 0),
            lora_name=_optional_str(fields.get("lora_name")),
            medium=_optional_str(fields.get("medium")) or "GPU",
            lora_id=_optional_int(fields.get("lora_id")),
            extra_keys=_extra_keys(fields.get("extra_keys")))
    if kind == "BlockRemoved":
        return BlockRemoved(block_hashes=_hashes(fields.get("block_hashes"), position),
                            medium=_optional_str(fields.get("medium")) or "GPU")
    if kind == "AllBlocksCleared":
        return AllBlocksCleared()
    raise KvEventDecodeError(f"events[{position}]: unknown event type {kind!r}")


def _hash(value: Any, position: int) -> int:
    if isinstance(value, bool):
        raise KvEventDecodeError(f"events[{position}]: block hash must be int or bytes")
    if isinstance(value, int):
        return value & 0xFFFF_FFFF_FFFF_FFFF
    if isinstance(value, bytes | bytearray):
        return to_event_int(bytes(value))
    raise KvEventDecodeError(f"events[{position}]: block hash must be int or bytes")


def _hashes(values: Any, position: int) -> tuple[int, ...]:
    if not isinstance(values, Sequence) or isinstance(values, str | bytes):
        raise KvEventDecodeError(f"events[{position}].block_hashes: expected a list")
    return tuple(_hash(value, position) for value in values)


def _optional_hash(value: Any, position: int) -> int | None:
    return None if value is None else _hash(value, position)


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _optional_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _extra_keys(value: Any) -> tuple[tuple[Any, ...] | None, ...] | None:
    """Each block's extra keys (a list, or None for a block with none); None when the event
    has none or they are not a list."""
    if not isinstance(value, list | tuple):
        return None
    return tuple(tuple(keys) if isinstance(keys, list | tuple) else None for keys in value)
