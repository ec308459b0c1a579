"""A bounded, thread-safe LRU of embeddings keyed by a hash of the text.

Keys are 16-byte BLAKE2b digests of the UTF-8 text, so the cache holds no prompt text and
its memory is bounded by ``capacity`` × (key + one embedding vector).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]


def text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", errors="replace"), digest_size=16).digest()


class EmbeddingCache:
    """LRU of at most ``capacity`` embeddings; ``capacity`` 0 disables caching."""

    __slots__ = ("_entries", "_lock", "capacity", "hits", "misses")

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("cache capacity must be >= 0")
        self.capacity = capacity
        self._entries: OrderedDict[bytes, Vector] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: bytes) -> Vector | None:
        with self._lock:
            vector = self._entries.get(key)
            if vector is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return vector

    def put(self, key: bytes, vector: Vector) -> None:
        if self.capacity == 0:
            return
        with self._lock:
            self._entries[key] = vector
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
