"""``PrefixHashMemo``: vLLM block hashes of recently seen prompt prefixes, found again cheaply.

vLLM's block hash (sha256 of a pickled tuple, ``workers.engine.block_hash``) costs about 3 µs a
block, and a conversation's next turn, or any prompt behind a long shared system prompt,
repeats a prefix whose blocks the router hashed moments ago. The memo maps a cheap
*fingerprint* of each prefix to its last block's vLLM hash, so that those leading blocks are
looked up (about 0.5 µs a block, the fingerprint included) and only the new tail is hashed.

A block's fingerprint chains its parent's with the block's token ids, read as one buffer of
4-byte ints (an ``array('i')``'s bytes, what the tokens producer gives):
``hash((parent_fingerprint, block_bytes))``, 64 bits, so an accidental collision is negligible
(about one in 10^13 per lookup with a million entries). Python's hash of bytes is keyed per
process (unless ``PYTHONHASHSEED`` fixes it), so a client cannot aim a prompt at another's
fingerprint; should one collide, what it gains is a wrong routing estimate for that prompt
(its blocks taken for the other's), nothing a worker serves. Reading the block as bytes
makes no int object per token and no list copy of the prompt: a prompt whose blocks are all
remembered costs less than half what it did with a tuple of ints per block
(``docs/benchmarks.md``, "Fingerprints read from the packed prompt"). Token ids that do not
fit in 32 bits (only a client's own ids can) are fingerprinted as tuples of ints instead:
the same prompt then has other fingerprints, so it is not found again, and nothing else
changes. The fingerprints of one prompt come from ``fingerprints`` and are only meaningful
within one process and one block size.

Bounded by ``max_blocks`` entries in two generations: lookups and inserts go to the young
dict (a hit in the old one is copied there); when the young one is full it becomes the old
one and the previous old one is dropped. So a block used since the last turnover survives the
next, like an LRU without reordering on every hit. Thread-safe: the blocks producer also runs
in executor threads.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Sequence

_ITEM_SIZE = array("i").itemsize     # bytes per token id in a packed prompt


def packed_tokens(tokens: Sequence[int]) -> bytes | None:
    """The token ids as one buffer of 4-byte ints, or None when one does not fit."""
    if isinstance(tokens, array) and tokens.typecode == "i":
        return tokens.tobytes()
    try:
        return array("i", tokens).tobytes()
    except (OverflowError, TypeError):
        return None


def fingerprints(tokens: Sequence[int], block_size: int, salt: object = None) -> list[int]:
    """One fingerprint per full block of ``tokens``, each covering the prefix up to its end;
    ``salt`` (hashable: e.g. the LoRA adapter's extra keys, which change every vLLM hash of
    the prompt) starts another chain of fingerprints for the same tokens."""
    result: list[int] = []
    append = result.append
    fingerprint = block_size if salt is None else hash((block_size, salt))
    packed = packed_tokens(tokens)
    if packed is None:           # ids beyond 32 bits: a tuple of ints per block
        for start in range(0, len(tokens) // block_size * block_size, block_size):
            fingerprint = hash((fingerprint, tuple(tokens[start:start + block_size])))
            append(fingerprint)
        return result
    step = block_size * _ITEM_SIZE
    for start in range(0, len(packed) // step * step, step):
        fingerprint = hash((fingerprint, packed[start:start + step]))
        append(fingerprint)
    return result


class PrefixHashMemo:
    """Fingerprint of a prefix → the vLLM hash of its last block, as a big-endian integer
    (the published 64 bits are its low bits, ``& (2**64 - 1)``; ``to_bytes`` gives the raw
    hash back to continue a chain)."""

    __slots__ = ("_lock", "_old", "_young", "hashed", "looked_up", "max_blocks")

    def __init__(self, max_blocks: int) -> None:
        self.max_blocks = max_blocks
        self._young: dict[int, int] = {}
        self._old: dict[int, int] = {}
        self._lock = threading.Lock()
        self.looked_up = 0     # blocks found here
        self.hashed = 0        # blocks stored after hashing

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def leading(self, prefix_fingerprints: Sequence[int]) -> list[int]:
        """The hashes of the leading blocks found, up to the first block not held."""
        found: list[int] = []
        generation = self.max_blocks // 2
        with self._lock:
            for fingerprint in prefix_fingerprints:
                block_hash = self._young.get(fingerprint)
                if block_hash is None:
                    block_hash = self._old.get(fingerprint)
                    if block_hash is None:
                        break
                    if len(self._young) >= generation:
                        self._turn_over()
                    self._young[fingerprint] = block_hash
                found.append(block_hash)
            self.looked_up += len(found)
        return found

    def store(self, prefix_fingerprints: Sequence[int], hashes: Sequence[int]) -> None:
        """Remember ``hashes[i]`` under ``prefix_fingerprints[i]`` (as many as fit in one
        generation, the leading ones: they are the most shared)."""
        generation = self.max_blocks // 2
        count = min(len(prefix_fingerprints), len(hashes), generation)
        if count <= 0:
            return
        with self._lock:
            if len(self._young) + count > generation:
                self._turn_over()
            self._young.update(zip(prefix_fingerprints[:count], hashes[:count], strict=True))
            self.hashed += count

    def _turn_over(self) -> None:
        self._old, self._young = self._young, {}
