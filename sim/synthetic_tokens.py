"""Deterministic synthetic token ids for traces that carry lengths but no text.

Token ids are drawn by a counter-based PRNG (SplitMix64's finaliser) keyed by
``(seed, domain, key, position)``, so the same key always gives the same tokens, whatever
worker block size later cuts them into blocks. Ids lie in cl100k_base's regular vocabulary
(``0 .. 100255``), so they are real token ids a tokenizer could decode.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

CL100K_REGULAR_VOCAB = 100_256
MOONCAKE_BLOCK_TOKENS = 512

DOMAIN_BLOCK = 1        # a Mooncake hash id's 512-token block
DOMAIN_PROMPT = 2       # a request's own unique prompt (no prefix identity)
DOMAIN_OUTPUT = 3       # a request's generated tokens

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _stream_bases(seed: int, domain: int, keys: Sequence[int]) -> npt.NDArray[np.uint64]:
    """One stream start per key: a mixed (seed, domain) salt xor'ed with the mixed key."""
    salt = _mix64(np.array([(seed * 0x1F3D5B79 + domain) & 0xFFFFFFFFFFFFFFFF],
                           dtype=np.uint64))
    mixed_keys = _mix64(np.array([k & 0xFFFFFFFFFFFFFFFF for k in keys], dtype=np.uint64))
    return mixed_keys ^ salt


def token_stream(seed: int, domain: int, key: int, length: int) -> list[int]:
    """``length`` token ids of the stream keyed by ``(seed, domain, key)``."""
    if length <= 0:
        return []
    with np.errstate(over="ignore"):
        base = _stream_bases(seed, domain, [key])
        counters = (np.arange(length, dtype=np.uint64) + base[0]) * _GOLDEN
        values = _mix64(counters) % np.uint64(CL100K_REGULAR_VOCAB)
    result: list[int] = values.astype(np.int64).tolist()
    return result


def mooncake_prompt(seed: int, hash_ids: Sequence[int], input_length: int) -> list[int]:
    """The prompt of a Mooncake row: one 512-token block per hash id, the last truncated.

    Block ``k`` depends only on ``(seed, hash_ids[k])``, so rows sharing leading hash ids share
    an identical token prefix.
    """
    if not hash_ids or input_length <= 0:
        return []
    with np.errstate(over="ignore"):
        bases = _stream_bases(seed, DOMAIN_BLOCK, hash_ids)
        positions = np.arange(MOONCAKE_BLOCK_TOKENS, dtype=np.uint64)
        counters = (bases[:, None] + positions[None, :]) * _GOLDEN
        values = _mix64(counters.reshape(-1)) % np.uint64(CL100K_REGULAR_VOCAB)
    result: list[int] = values[:input_length].astype(np.int64).tolist()
    return result
