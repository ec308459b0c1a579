"""Prefix-caching block hashes, computed exactly as vLLM V1 computes them.

A block's hash chains its parent's hash with its own token ids (``v1/core/kv_cache_utils.py``
``hash_block_tokens``)::

    hash(block_i) = H((parent_hash_bytes, tuple(token_ids_of_block_i), extra_keys))

with ``parent_hash`` of block 0 = ``NONE_HASH = H(seed)``. ``H`` is vLLM's
``prefix_caching_hash_algo``:

- ``sha256`` (vLLM's default): sha256 of ``pickle.dumps(obj, protocol=5)``;
- ``sha256_cbor``: sha256 of ``cbor2.dumps(obj, canonical=True)`` (needs ``cbor2``);
- ``builtin``: not a vLLM algorithm. Python's ``hash()`` of the same tuple (with the parent
  read as an integer), truncated to 8 bytes. About ten times cheaper, for in-process
  simulation only; it is reproducible across processes only without string extra keys.

The seed is ``$PYTHONHASHSEED`` when set, else ``"vllm-none-hash"`` (vLLM v0.3x). KV events
publish the lower 64 bits of a hash as an unsigned integer (``to_event_int``).
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

DEFAULT_SEED = "vllm-none-hash"
HASH_ALGOS = ("sha256", "sha256_cbor", "builtin")
_MASK_64 = (1 << 64) - 1


def _sha256_pickle(obj: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def _sha256_cbor(obj: Any) -> bytes:
    try:
        import cbor2
    except ImportError as exc:  # pragma: no cover - cbor2 is a declared dependency
        raise ValueError("hash algo 'sha256_cbor' needs the cbor2 package") from exc
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def _builtin(obj: Any) -> bytes:
    parent, token_ids, extra_keys = obj
    # hash(None) is address-based before Python 3.12: leave it out of the tuple.
    if extra_keys is None:
        value = hash((int.from_bytes(parent, "big"), token_ids))
    else:
        value = hash((int.from_bytes(parent, "big"), token_ids, extra_keys))
    return (value & _MASK_64).to_bytes(8, "big")


def get_hash_function(algo: str) -> Callable[[Any], bytes]:
    """The function ``H`` of ``algo``; a ValueError names the known algorithms."""
    if algo == "sha256":
        return _sha256_pickle
    if algo == "sha256_cbor":
        return _sha256_cbor
    if algo == "builtin":
        return _builtin
    raise ValueError(f"unknown hash algo {algo!r}; expected one of {', '.join(HASH_ALGOS)}")


def resolve_seed(seed: str | None = None) -> str:
    """The seed vLLM hashes into NONE_HASH: the given one, else $PYTHONHASHSEED, else fixed."""
    if seed is not None:
        return seed
    return os.environ.get("PYTHONHASHSEED") or DEFAULT_SEED


def none_hash(algo: str = "sha256", seed: str | None = None) -> bytes:
    """The parent hash of block 0. ``builtin`` shares sha256's value (it only needs bytes)."""
    seed_value = resolve_seed(seed)
    if algo == "sha256_cbor":
        return _sha256_cbor(seed_value)
    get_hash_function(algo)  # validates the name
    return _sha256_pickle(seed_value)


def hash_block_tokens(parent: bytes, token_ids: Sequence[int],
                      extra_keys: tuple[Any, ...] | None = None,
                      algo: str = "sha256") -> bytes:
    """Hash of one full block given its parent's hash (NONE_HASH for block 0)."""
    return get_hash_function(algo)((parent, tuple(token_ids), extra_keys))


def block_hash_chain(token_ids: Sequence[int], block_size: int, algo: str = "sha256",
                     seed: str | None = None,
                     extra_keys: tuple[Any, ...] | None = None,
                     cache_salt: str | None = None,
                     parent: bytes | None = None) -> list[bytes]:
    """Hashes of every full block of ``token_ids``; a trailing partial block is not hashed.

    ``extra_keys`` applies to every block (e.g. a LoRA ``(("lora", name, path),)``);
    ``cache_salt`` is appended to block 0's keys only, as vLLM does. ``parent``: the hash of
    the block before ``token_ids`` when they continue a chain hashed earlier (then the first
    block is not block 0: no ``cache_salt``, and ``seed`` is not used).
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    hash_fn = get_hash_function(algo)
    continued = parent is not None
    if parent is None:
        parent = none_hash(algo, seed)
    hashes: list[bytes] = []
    tokens = token_ids if isinstance(token_ids, list | tuple) else list(token_ids)
    for start in range(0, len(tokens) - block_size + 1, block_size):
        keys = extra_keys
        if start == 0 and cache_salt is not None and not continued:
            keys = (*(extra_keys or ()), ("cache_salt", cache_salt))
        parent = hash_fn((parent, tuple(tokens[start:start + block_size]), keys))
        hashes.append(parent)
    return hashes


def to_event_int(h: bytes | int) -> int:
    """The value KV events publish for a hash: its lower 64 bits, unsigned (an integer
    hash, as the engine keeps ``builtin`` ones, is read as its big-endian bytes' value)."""
    if isinstance(h, int):
        return h & _MASK_64
    return int.from_bytes(h[-8:], "big")      # the last 8 bytes are the lower 64 bits
