"""Deterministic synthetic token ids for traces that carry lengths but no text.

``SyntheticTokens(seed)`` draws a pool of 2**18 token ids once (numpy PRNG seeded by
``seed``, uniform over cl100k_base's regular vocabulary ``0 .. 100255``). A token stream
keyed by ``(domain, key)`` is a chain of 128-token segments of that pool, each starting at an
offset given by SplitMix64 of ``(seed, domain, key, segment)``: the same key always gives the
same tokens, different keys give different ones (72 bits of offsets per 512-token block), and
building a prompt is list slicing rather than per-token work. The ids are real token ids a
tokenizer could decode.

A Mooncake hash id is the key of one 512-token block (``DOMAIN_BLOCK``), so rows that share
leading hash ids share an identical token prefix, whatever worker block size later cuts the
prompt into blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

CL100K_REGULAR_VOCAB = 100_256
MOONCAKE_BLOCK_TOKENS = 512
SEGMENT_TOKENS = 128
POOL_BITS = 18

DOMAIN_BLOCK = 1        # a Mooncake hash id's 512-token block
DOMAIN_PROMPT = 2       # a request's own unique prompt (no prefix identity)
DOMAIN_OUTPUT = 3       # a request's generated tokens

_MASK_64 = (1 << 64) - 1
_POOL_MASK = (1 << POOL_BITS) - 1


def mix64(x: int) -> int:
    """SplitMix64's finaliser: a bijective, well-mixed 64-bit hash."""
    x &= _MASK_64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK_64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK_64
    return x ^ (x >> 31)


class SyntheticTokens:
    """Token streams keyed by integers; see the module docstring."""

    __slots__ = ("_pool", "_salt")

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        values = rng.integers(0, CL100K_REGULAR_VOCAB, (1 << POOL_BITS) + SEGMENT_TOKENS)
        vocabulary = list(range(CL100K_REGULAR_VOCAB))      # one int object per token id
        self._pool: list[int] = [vocabulary[v] for v in values.tolist()]
        self._salt = mix64(seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019)

    def _extend(self, out: list[int], domain: int, key: int, length: int) -> None:
        pool = self._pool
        base = mix64(self._salt ^ (domain << 56) ^ (key & 0xFFFFFFFFFFFFFF))
        segment = 0
        while length > 0:
            offsets = mix64(base + segment)
            for shift in (0, POOL_BITS, 2 * POOL_BITS):
                if length <= 0:
                    break
                start = (offsets >> shift) & _POOL_MASK
                take = SEGMENT_TOKENS if length > SEGMENT_TOKENS else length
                out += pool[start:start + take]
                length -= take
            segment += 1

    def stream(self, domain: int, key: int, length: int) -> list[int]:
        """``length`` token ids of the stream keyed by ``(domain, key)``."""
        out: list[int] = []
        self._extend(out, domain, key, length)
        return out

    def mooncake_prompt(self, hash_ids: Sequence[int], input_length: int) -> list[int]:
        """One 512-token block per hash id, the last truncated to ``input_length``.

        Block ``k`` depends only on ``hash_ids[k]``, so rows sharing leading hash ids share
        an identical token prefix.
        """
        out: list[int] = []
        remaining = input_length
        for hash_id in hash_ids:
            if remaining <= 0:
                break
            take = MOONCAKE_BLOCK_TOKENS if remaining > MOONCAKE_BLOCK_TOKENS else remaining
            self._extend(out, DOMAIN_BLOCK, hash_id, take)
            remaining -= take
        return out
