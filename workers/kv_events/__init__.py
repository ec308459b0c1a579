"""Exact prefix knowledge from vLLM's KV-cache events (ZMQ), per worker.

``decode`` turns one msgpack payload into engine KV events (both the map encoding of vLLM
≥ v0.26 and the older tagged-array one); ``exact_index`` keeps each worker's block set and
sequence-number bookkeeping (gaps, replays, publisher restarts); ``subscriber`` connects to
the workers' PUB sockets (and replay ROUTER sockets) and feeds the index.
"""

from workers.kv_events.decode import KvEventBatch, KvEventDecodeError, decode_batch
from workers.kv_events.exact_index import ExactPrefixIndex
from workers.kv_events.subscriber import KvEventSource, KvEventSubscriber

__all__ = [
    "ExactPrefixIndex",
    "KvEventBatch",
    "KvEventDecodeError",
    "KvEventSource",
    "KvEventSubscriber",
    "decode_batch",
]
