"""Exact mode: kvroute follows the engines' real KV-event streams (ZMQ, msgpack) and its
per-worker block sets are exactly the blocks kvroute hashes for the prompts it routed there:
same tokenizer, chat template, block size (128 on CPU) and hash chain as vLLM."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

from policies.producers.blocks import BlocksParams, BlocksProducer
from policies.producers.model_tokenizer import ModelTokenizer
from tests.real_vllm.conftest import MODEL, RealFleet, RouterFactory, prefix_routing
from workers.kv_events import ExactPrefixIndex, KvEventSource, KvEventSubscriber

BLOCK_SIZE = 128


def chat(tenant: int, question: str) -> list[dict[str, str]]:
    rules = " ".join(f"rule {tenant}.{i}: answer politely about order {i}." for i in range(60))
    return [{"role": "system", "content": f"Tenant {tenant}. {rules}"},
            {"role": "user", "content": question}]


async def wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.2)
    return False


async def test_block_sets_follow_the_engines_events(real_fleet: RealFleet,
                                                    make_router: RouterFactory) -> None:
    workers = [w.info for w in real_fleet.fleet.workers]
    index = ExactPrefixIndex()
    sources = [KvEventSource(w.id, str(w.kv_events_endpoint)) for w in workers]
    tokenizer = ModelTokenizer.from_dir(real_fleet.model_dir)
    hasher = BlocksProducer("blocks", BlocksParams())
    router = await make_router(prefix_routing(real_fleet.model_dir))
    async with KvEventSubscriber(index, sources) as subscriber:
        await asyncio.sleep(1.0)                       # let the SUB sockets join
        # AllBlocksCleared goes out with the engine's next step, so the first batch the index
        # sees carries it: from then on each worker's set is exact
        real_fleet.reset_prefix_caches()

        expected: dict[str, set[int]] = {w.id: set() for w in workers}
        conversations = [chat(1, "Where is my parcel?"), chat(2, "Refund please."),
                         chat(1, "Change my address."), chat(3, "Cancel my order.")]
        async with aiohttp.ClientSession() as session:
            for messages in conversations:
                body = {"model": MODEL, "messages": messages, "max_tokens": 1}
                async with session.post(router.url + "/v1/chat/completions", json=body) as resp:
                    assert resp.status == 200, await resp.text()
                    worker = resp.headers["x-kvroute-worker"]
                chain = hasher.chain(tokenizer.chat_ids(messages), BLOCK_SIZE)
                assert len(chain) >= 4
                expected[worker].update(chain)

        def caught_up() -> bool:
            return all(index.is_exact(w) and index.blocks(w) == len(hashes)
                       for w, hashes in expected.items())

        arrived = await wait_for(caught_up)
        got = {w.id: index.blocks(w.id) for w in workers}
        assert arrived, f"index holds {got}, expected {({w: len(h) for w, h in expected.items()})}"
        for worker_id, hashes in expected.items():
            assert index.is_exact(worker_id)
            assert all(index.holds(worker_id, h) for h in hashes)
        for info in workers:
            assert subscriber.counters[info.id].decode_errors == 0
