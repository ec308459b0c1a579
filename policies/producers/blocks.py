"""``blocks`` producer: the chained prefix-cache block hashes of the request's prompt.

Fills ``request.block_hashes[block_size]`` for every distinct block size among the candidate
workers (read from their ``cache_config_info``) plus ``extra_block_sizes``. Each entry is the
list of the prompt's full blocks hashed exactly as vLLM hashes them
(``workers.engine.block_hash.block_hash_chain``: same algorithm, same seed), published form:
the lower 64 bits as an unsigned int, which is what KV events carry, so the approximate and
the exact (KV-event) indexes key on the same numbers. Hashes match a worker's only when the
router tokenizes as the worker does (same tokenizer and chat template); ``seed`` must equal
the workers' ``PYTHONHASHSEED`` when they set one.

Chains are cached in an LRU keyed by (block size, digest of the token ids), bounded by
``cache_max_blocks`` hashes in total. Hashing costs about 3 µs per block, so prompts with
more than ``offload_min_blocks`` uncached blocks ask to run off the event loop.

```yaml
producers:
  - type: blocks
    params:
      algo: sha256            # sha256 (vLLM's default), sha256_cbor or builtin
      seed: null              # null: $PYTHONHASHSEED if set, else vLLM's "vllm-none-hash"
      extra_block_sizes: []   # also hash at these sizes (e.g. for workers not yet scraped)
      cache_max_blocks: 2000000
      offload_min_blocks: 256
```
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from policies.base import RoutingRequest
from policies.errors import ParamError
from policies.registry import PluginRegistry
from workers.engine.block_hash import HASH_ALGOS, block_hash_chain, to_event_int
from workers.models import WorkerView

TYPE_NAME = "blocks"


@dataclass(frozen=True, slots=True)
class BlocksParams:
    algo: str = "sha256"
    seed: str | None = None
    extra_block_sizes: tuple[int, ...] = ()
    cache_max_blocks: int = 2_000_000
    offload_min_blocks: int = 256

    def __post_init__(self) -> None:
        if self.algo not in HASH_ALGOS:
            raise ParamError("algo", f"must be one of: {', '.join(HASH_ALGOS)}")
        if any(size <= 0 for size in self.extra_block_sizes):
            raise ParamError("extra_block_sizes", "sizes must be > 0")
        if self.cache_max_blocks < 0:
            raise ParamError("cache_max_blocks", "must be >= 0")
        if self.offload_min_blocks < 0:
            raise ParamError("offload_min_blocks", "must be >= 0")


class ChainCache:
    """LRU of hash chains bounded by the total number of hashes held. Thread-safe."""

    __slots__ = ("_entries", "_lock", "_size", "max_blocks")

    def __init__(self, max_blocks: int) -> None:
        self.max_blocks = max_blocks
        self._entries: OrderedDict[tuple[int, bytes], tuple[int, ...]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def blocks(self) -> int:
        return self._size

    def get(self, key: tuple[int, bytes]) -> tuple[int, ...] | None:
        with self._lock:
            chain = self._entries.get(key)
            if chain is not None:
                self._entries.move_to_end(key)
            return chain

    def contains(self, key: tuple[int, bytes]) -> bool:
        with self._lock:
            return key in self._entries

    def put(self, key: tuple[int, bytes], chain: tuple[int, ...]) -> None:
        if len(chain) > self.max_blocks:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size -= len(old)
            self._entries[key] = chain
            self._size += len(chain)
            while self._size > self.max_blocks:
                _, dropped = self._entries.popitem(last=False)
                self._size -= len(dropped)


class BlocksProducer:
    """Computes ``request.block_hashes`` for the workers' block sizes."""

    def __init__(self, name: str, params: BlocksParams) -> None:
        self.name = name
        self.algo = params.algo
        self.seed = params.seed
        self.extra_block_sizes = tuple(sorted(set(params.extra_block_sizes)))
        self.offload_min_blocks = params.offload_min_blocks
        self.cache = ChainCache(params.cache_max_blocks)

    def block_sizes(self, workers: Sequence[WorkerView]) -> list[int]:
        sizes = {view.block_size for view in workers if view.block_size > 0}
        sizes.update(self.extra_block_sizes)
        return sorted(sizes)

    def produce(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> None:
        tokens = request.prompt_token_ids
        if not tokens:
            return
        digest = token_digest(tokens)
        for size in self.block_sizes(workers):
            request.block_hashes[size] = self.chain(tokens, size, digest)

    def chain(self, tokens: Sequence[int], block_size: int,
              digest: bytes | None = None) -> tuple[int, ...]:
        key = (block_size, digest if digest is not None else token_digest(tokens))
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        ids = tokens if isinstance(tokens, list | tuple) else list(tokens)
        chain = tuple(to_event_int(h) for h in block_hash_chain(
            ids, block_size, algo=self.algo, seed=self.seed))
        self.cache.put(key, chain)
        return chain

    def should_offload(self, request: RoutingRequest) -> bool:
        """True when hashing this prompt would hold the event loop for long."""
        tokens = request.prompt_token_ids
        if not tokens or len(tokens) // 16 < self.offload_min_blocks:
            return False
        return not self.cache.contains((16, token_digest(tokens)))


def token_digest(tokens: Sequence[int]) -> bytes:
    """A 16-byte digest of a token-id sequence (the cache key)."""
    data = tokens.tobytes() if isinstance(tokens, array) else array("q", tokens).tobytes()
    return hashlib.blake2b(data, digest_size=16).digest()


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "producer", BlocksParams,
                      lambda params, ctx: BlocksProducer(ctx.name, params),
                      needs=("prompt_token_ids",), provides=("block_hashes",))

