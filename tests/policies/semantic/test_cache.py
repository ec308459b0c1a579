"""The embedding LRU: hits, misses, eviction order, disabled cache."""

from __future__ import annotations

import numpy as np
import pytest

from policies.semantic.cache import EmbeddingCache, text_key


def vec(value: float) -> np.ndarray:
    return np.full(3, value, dtype=np.float32)


def test_lru_evicts_the_least_recently_used() -> None:
    cache = EmbeddingCache(2)
    cache.put(text_key("a"), vec(1))
    cache.put(text_key("b"), vec(2))
    assert cache.get(text_key("a")) is not None        # a is now the most recent
    cache.put(text_key("c"), vec(3))                    # evicts b
    assert cache.get(text_key("b")) is None
    got = cache.get(text_key("c"))
    assert got is not None and got[0] == 3.0
    assert len(cache) == 2
    assert (cache.hits, cache.misses) == (2, 1)


def test_capacity_zero_caches_nothing() -> None:
    cache = EmbeddingCache(0)
    cache.put(text_key("a"), vec(1))
    assert cache.get(text_key("a")) is None
    assert len(cache) == 0


def test_keys_are_content_hashes() -> None:
    assert text_key("same") == text_key("same")
    assert text_key("same") != text_key("Same")
    assert len(text_key("x" * 10_000)) == 16
    with pytest.raises(ValueError):
        EmbeddingCache(-1)
