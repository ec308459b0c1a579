"""The exact index fed by a real emulator process's KV events over ZMQ on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

from workers.emulator.process import EmulatorProcess
from workers.engine.block_hash import block_hash_chain, to_event_int
from workers.kv_events import ExactPrefixIndex, KvEventSource, KvEventSubscriber
from workers.ports import free_port

PROMPT = list(range(1000, 1040))         # two full 16-token blocks and a partial one


def complete(url: str, prompt: list[int]) -> None:
    body = json.dumps({"model": "llama-3-8b", "prompt": prompt, "max_tokens": 1}).encode()
    request = urllib.request.Request(f"{url}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


@pytest.mark.integration
@pytest.mark.parametrize("encoding", ["map", "array"])
async def test_emulator_events_build_the_exact_block_set(encoding: str) -> None:
    pub, replay = free_port(), free_port()
    args = ["--kv-events", f"tcp://127.0.0.1:{pub}",
            "--kv-events-replay", f"tcp://127.0.0.1:{replay}",
            "--kv-events-topic", "kv", "--kv-events-encoding", encoding]
    expected = [to_event_int(h) for h in block_hash_chain(PROMPT, 16)]
    index = ExactPrefixIndex()
    source = KvEventSource("w", f"tcp://127.0.0.1:{pub}",
                           replay_endpoint=f"tcp://127.0.0.1:{replay}", topic="kv")
    with EmulatorProcess(time_scale=0.0, extra_args=args) as worker:
        async with KvEventSubscriber(index, [source]) as subscriber:
            async with asyncio.timeout(10):
                for filler in range(1, 1000):
                    await asyncio.to_thread(complete, worker.url, PROMPT)
                    # PROMPT's events published before the subscription took (a loaded
                    # machine) are not published again (its blocks stay cached): another
                    # prompt's events show the gap, and the replay brings them
                    await asyncio.to_thread(complete, worker.url, [5000 + filler] * 20)
                    if index.match("w", expected) == len(expected):
                        break
                    await asyncio.sleep(0.05)
            assert index.is_exact("w")
            assert index.match("w", expected) == 2
            assert subscriber.counters["w"].decode_errors == 0
