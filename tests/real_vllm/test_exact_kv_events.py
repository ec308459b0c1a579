"""Exact mode: kvroute follows the engines' real KV-event streams (ZMQ, msgpack) and its
per-worker block sets are exactly the blocks kvroute hashes for the prompts it routed there:
same tokenizer, chat template, block size (128 on CPU) and hash chain as vLLM; a subscriber
joining engines that already published is replayed their history by vLLM's replay socket."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

from policies.producers.blocks import BlocksParams, BlocksProducer
from policies.producers.model_tokenizer import ModelTokenizer
from tests.real_vllm.conftest import MODEL, RealFleet, RouterFactory, prefix_routing
from workers.kv_events import ExactPrefixIndex, KvEventSource, KvEventSubscriber
from workers.kv_events.wiring import REPLAY_LABEL

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


async def test_a_late_subscriber_is_replayed_what_the_engines_published_before(
        real_fleet: RealFleet) -> None:
    """A router started (or a replica added) after the engines published asks each engine's
    replay socket for everything from 0: vLLM answers only a request in a REQ socket's
    envelope, and dropped the bare frame kvroute sent, so every replay ran out unanswered and
    the blocks cached before the join stayed unknown."""
    workers = [w.info for w in real_fleet.fleet.workers]
    tokenizer = ModelTokenizer.from_dir(real_fleet.model_dir)
    hasher = BlocksProducer("blocks", BlocksParams())

    async def complete(url: str, messages: list[dict[str, str]]) -> list[int]:
        body = {"model": MODEL, "messages": messages, "max_tokens": 1}
        async with aiohttp.ClientSession() as session, session.post(
                url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
        return hasher.chain(tokenizer.chat_ids(messages), BLOCK_SIZE)

    before = {w.id: await complete(w.url, chat(20 + i, "What did I order?"))
              for i, w in enumerate(workers)}
    index = ExactPrefixIndex()
    sources = [KvEventSource(w.id, str(w.kv_events_endpoint),
                             replay_endpoint=w.labels[REPLAY_LABEL]) for w in workers]
    async with KvEventSubscriber(index, sources, replay_timeout_s=10.0) as subscriber:
        await asyncio.sleep(1.0)                       # let the SUB sockets join
        after = {w.id: await complete(w.url, chat(30 + i, "Track my parcel."))
                 for i, w in enumerate(workers)}       # the first batches seen: a late join

        def replayed() -> bool:
            return all(subscriber.counters[w.id].replays >= 1 and not index.state(w.id).gap_open
                       for w in workers)

        assert await wait_for(replayed), {w.id: subscriber.counters[w.id] for w in workers}
        for info in workers:
            counters = subscriber.counters[info.id]
            assert counters.replayed_batches > 0 and counters.decode_errors == 0, counters
            assert index.is_exact(info.id)
            assert all(index.holds(info.id, h) for h in before[info.id] + after[info.id])
