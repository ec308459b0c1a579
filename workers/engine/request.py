"""The engine's per-request state (vLLM's ``v1/request.py``), with lazily grown block hashes.

The caller fixes the output tokens up front (``EngineRequest.output_token_ids``), so the whole
token sequence is known; block hashes are computed only when the scheduler needs them, up to
the tokens that exist so far (prompt + generated), exactly as vLLM grows them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from workers.engine.api import EngineRequest, FinishReason
from workers.engine.kv_cache_utils import BlockHash, KVCacheBlock

_MASK_64 = (1 << 64) - 1


class RequestStatus(enum.IntEnum):
    """Anything after PREEMPTED is a finished status."""

    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED = 3


class BlockHasher:
    """Extends a request's block-hash chain; one per engine (algo, seed and block size).

    With ``int_chain`` (the ``builtin`` algo) hashes are kept as the integers
    ``int.from_bytes(block_hash_chain(..., algo="builtin")[i])``: the same identities and
    event values, without a bytes round trip per block.
    """

    __slots__ = ("block_size", "hash_fn", "int_chain", "none_hash")

    def __init__(self, hash_fn: Callable[[Any], bytes], none_hash: bytes,
                 block_size: int, int_chain: bool = False) -> None:
        self.hash_fn = hash_fn
        self.none_hash: BlockHash = int.from_bytes(none_hash, "big") if int_chain else none_hash
        self.block_size = block_size
        self.int_chain = int_chain

    def extend(self, request: Request, num_blocks: int) -> None:
        """Make ``request.block_hashes`` at least ``num_blocks`` long (full blocks only)."""
        hashes = request.block_hashes
        start = len(hashes)
        if start >= num_blocks:
            return
        if self.int_chain:
            self._extend_int(request, start, num_blocks)
            return
        bs = self.block_size
        tokens = request.all_token_ids
        hash_fn = self.hash_fn
        parent = hashes[-1] if hashes else self.none_hash
        keys = request.extra_keys
        append = hashes.append
        for i in range(start, num_blocks):
            block_keys = request.first_block_keys if i == 0 else keys
            parent = hash_fn((parent, tuple(tokens[i * bs:(i + 1) * bs]), block_keys))
            append(parent)

    def _extend_int(self, request: Request, start: int, num_blocks: int) -> None:
        hashes = request.block_hashes
        bs = self.block_size
        tokens = request.all_token_ids
        parent = hashes[-1] if hashes else self.none_hash
        append = hashes.append
        mask = _MASK_64
        if request.extra_keys is None and request.first_block_keys is None:
            # all_token_ids is a tuple: a slice is already the hashed tuple.
            hashes.extend([parent := hash((parent, tokens[i:i + bs])) & mask
                           for i in range(start * bs, num_blocks * bs, bs)])
            return
        for i in range(start, num_blocks):
            keys = request.first_block_keys if i == 0 else request.extra_keys
            block = tuple(tokens[i * bs:(i + 1) * bs])
            value = hash((parent, block)) if keys is None else hash((parent, block, keys))
            parent = value & mask
            append(parent)


class Request:
    """One request inside the engine. ``num_tokens`` = prompt + generated so far."""

    __slots__ = ("all_token_ids", "arrival_time", "block_hashes", "blocks", "event_keys",
                 "extra_keys", "finish_reason", "first_block_keys", "first_scheduled_time",
                 "first_token_time", "lora_id", "lora_name", "max_output_tokens",
                 "num_cached_blocks",
                 "num_cached_tokens", "num_computed_tokens", "num_output_tokens",
                 "num_preemptions", "num_prompt_tokens", "num_tokens", "pooling",
                 "probe_evictions", "probe_hits", "request_id", "status", "token_times")

    def __init__(self, req: EngineRequest, max_model_len: int) -> None:
        self.request_id = req.request_id
        prompt = tuple(req.prompt_token_ids)
        output = tuple(req.output_token_ids)
        self.num_prompt_tokens = len(prompt)
        room = max_model_len - self.num_prompt_tokens
        self.finish_reason: FinishReason = req.finish_reason
        if len(output) > room:
            output = output[:room]
            self.finish_reason = "length"
        self.max_output_tokens = len(output)
        self.all_token_ids = prompt + output
        self.num_tokens = self.num_prompt_tokens
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        self.status = RequestStatus.WAITING
        self.arrival_time = req.arrival_time
        self.first_scheduled_time = -1.0
        self.first_token_time = -1.0
        self.num_cached_tokens = -1
        self.num_preemptions = 0
        self.lora_name = req.lora_name
        self.pooling = req.pooling
        # vLLM's LoRA key is ("lora", name, path) (docs: vllm-interface.md §4.1)
        self.extra_keys: tuple[Any, ...] | None = (
            (("lora", req.lora_name, req.lora_path or req.lora_name),) if req.lora_name
            else None)
        self.first_block_keys: tuple[Any, ...] | None = self.extra_keys
        if req.cache_salt is not None:
            self.first_block_keys = (*(self.extra_keys or ()), ("cache_salt", req.cache_salt))
        self.lora_id = req.lora_id
        # the keys as KV events publish them, untagged: (the first block's, the others')
        self.event_keys = (_untagged(self.first_block_keys), _untagged(self.extra_keys))
        self.block_hashes: list[BlockHash] = []
        self.blocks: list[KVCacheBlock] = []
        self.num_cached_blocks = 0
        self.token_times: list[float] = []
        # The last prefix-cache probe of a waiting request, valid while the pool's
        # eviction count equals probe_evictions (a blocked head is probed every step).
        self.probe_evictions = -1
        self.probe_hits: list[KVCacheBlock] = []

    @property
    def is_finished(self) -> bool:
        return self.status > RequestStatus.PREEMPTED

    @property
    def is_decoding(self) -> bool:
        """Prefill done and exactly one (the last sampled) token left to compute."""
        return self.num_output_tokens > 0 and self.num_computed_tokens == self.num_tokens - 1

    def __repr__(self) -> str:
        return (f"Request({self.request_id!r}, tokens={self.num_tokens}, "
                f"computed={self.num_computed_tokens}, status={self.status.name})")


def _untagged(keys: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """vLLM's ``to_event_extra_keys`` for one block: each tagged key's value (the LoRA name,
    the cache salt)."""
    return None if keys is None else tuple(key[1] for key in keys)
