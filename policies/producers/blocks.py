"""``blocks`` producer: the chained prefix-cache block hashes of the request's prompt.

Fills ``request.block_hashes[block_size]`` for every distinct block size among the candidate
workers (read from their ``cache_config_info``) plus ``extra_block_sizes``. Each entry is the
list of the prompt's full blocks hashed exactly as vLLM hashes them
(``workers.engine.block_hash.block_hash_chain``: same algorithm, same seed), published form:
the lower 64 bits as an unsigned int, which is what KV events carry, so the approximate and
the exact (KV-event) indexes key on the same numbers. Hashes match a worker's only when the
router tokenizes as the worker does (same tokenizer and chat template); ``seed`` must equal
the workers' ``PYTHONHASHSEED`` when they set one. A request naming a LoRA adapter a worker
has loaded is hashed with vLLM's extra key ``("lora", name, path)`` on every block (the path
is the adapter's ``/v1/models`` card's ``root``, else its name): the same prompt under another
adapter, or under the base model, shares no block with it, as in the engine's cache. A
request naming an alias of an adapter is hashed as that adapter's
(``policies.producers.served_model``); a rule with other conditions that sets an
``adapter:`` is applied after the producers: its requests are hashed as the model the client
named.

The hashes of prefixes seen lately are remembered (``policies.producers.hash_memo``): a
prompt that extends one seen before (a conversation's next turn, a long shared system prompt)
looks up its leading blocks at about 0.5 µs each and hashes only the rest with vLLM's hash
(about 3 µs a block). The memo holds at most ``cache_max_blocks`` hashes (about 130 bytes
each). Prompts of at least ``offload_min_blocks`` full 16-token blocks ask to run off the event
loop.

```yaml
producers:
  - type: blocks
    params:
      algo: sha256            # sha256 (vLLM's default), sha256_cbor or builtin
      seed: null              # null: $PYTHONHASHSEED if set, else vLLM's "vllm-none-hash"
      extra_block_sizes: []   # also hash at these sizes (e.g. for workers not yet scraped)
      cache_max_blocks: 500000  # about 65 MB; 8M prompt tokens of prefixes
      offload_min_blocks: 256
```
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from policies.base import RoutingRequest
from policies.errors import ParamError
from policies.producers.hash_memo import PrefixHashMemo, fingerprints
from policies.producers.served_model import produced_model
from policies.registry import PluginRegistry
from workers.engine.block_hash import HASH_ALGOS, block_hash_chain, get_hash_function
from workers.models import WorkerView

TYPE_NAME = "blocks"
_MASK_64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class BlocksParams:
    algo: str = "sha256"
    seed: str | None = None
    extra_block_sizes: tuple[int, ...] = ()
    cache_max_blocks: int = 500_000
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


class BlocksProducer:
    """Computes ``request.block_hashes`` for the workers' block sizes."""

    def __init__(self, name: str, params: BlocksParams) -> None:
        self.name = name
        self.algo = params.algo
        self.seed = params.seed
        self.extra_block_sizes = tuple(sorted(set(params.extra_block_sizes)))
        self.offload_min_blocks = params.offload_min_blocks
        self.cache_max_blocks = params.cache_max_blocks
        self.memos: dict[int, PrefixHashMemo] = {}     # per block size (read for stats)
        # bytes of one block hash (8 for builtin), to turn a remembered one back into bytes
        self._digest_size = len(get_hash_function(self.algo)((b"", (0,), None)))

    def block_sizes(self, workers: Sequence[WorkerView]) -> list[int]:
        sizes = {view.block_size for view in workers if view.block_size > 0}
        sizes.update(self.extra_block_sizes)
        return sorted(sizes)

    def produce(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> None:
        tokens = request.prompt_token_ids
        if not tokens:
            return
        extra_keys = lora_extra_keys(produced_model(request), workers)
        for size in self.block_sizes(workers):
            request.block_hashes[size] = self.chain(tokens, size, extra_keys)

    def chain(self, tokens: Sequence[int], block_size: int,
              extra_keys: tuple[Any, ...] | None = None) -> array[int]:
        """The published hashes of ``tokens``' full blocks: the leading ones from the memo,
        the rest hashed (and remembered).

        An ``array('Q')``, not a tuple: a request keeps its chain until it finishes, and a
        young tuple of ints makes the garbage collector's next young collection visit each
        int, scattered in memory (about 2 µs per 128-block chain on a cold cache, inside
        whatever the event loop was doing); an array is one flat buffer it does not walk."""
        memo = self.memos.get(block_size)
        if memo is None:
            memo = self.memos.setdefault(block_size, PrefixHashMemo(self.cache_max_blocks))
        prefixes = fingerprints(tokens, block_size, extra_keys)
        hashes = memo.leading(prefixes)
        known = len(hashes)
        if known < len(prefixes):
            parent = (hashes[-1].to_bytes(self._digest_size, "big") if hashes else None)
            new = [int.from_bytes(h, "big") for h in block_hash_chain(
                tokens[known * block_size:len(prefixes) * block_size], block_size,
                algo=self.algo, seed=self.seed, extra_keys=extra_keys, parent=parent)]
            memo.store(prefixes[known:], new)
            hashes.extend(new)
        return array("Q", [h & _MASK_64 for h in hashes])     # to_event_int of each

    def should_offload(self, request: RoutingRequest) -> bool:
        """True for prompts long enough to hold the event loop for long, cached or not (the
        lookups alone take about 0.5 µs a block)."""
        tokens = request.prompt_token_ids
        if not tokens:
            return False
        return len(tokens) // 16 >= self.offload_min_blocks


def lora_extra_keys(model: str, workers: Sequence[WorkerView]) -> tuple[Any, ...] | None:
    """vLLM's extra hash keys of a request for ``model`` when it is a LoRA adapter some
    worker has loaded (``(("lora", name, path),)``), else None."""
    for view in workers:
        if model in view.info.models:
            return None                      # a base model (the common case: found first)
        if model in view.lora_adapters:
            path = next((p for name, p in view.lora_paths if name == model), model)
            return (("lora", model, path),)
    return None


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "producer", BlocksParams,
                      lambda params, ctx: BlocksProducer(ctx.name, params),
                      needs=("prompt_token_ids",), provides=("block_hashes",))

