"""workers/emulator/logprobs.py: log-probabilities asked of the emulator come back in vLLM's
shapes, for each generated token, whole or streamed (they were always null)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.workers.emulator.emulator_fixtures import MODEL, emulator
from workers.emulator.logprobs import chat_logprobs, completion_logprobs, logprob
from workers.emulator.process import EmulatorProcess
from workers.emulator.tokens import Tokenizer


def test_the_numbers_are_the_same_every_time_and_the_chosen_token_is_likeliest() -> None:
    tok = Tokenizer()
    ids = list(tok.output_vocabulary[:4])
    chat = chat_logprobs(tok, ids, 0, 3)
    assert chat == chat_logprobs(tok, ids, 0, 3)
    for position, entry in enumerate(chat["content"]):
        assert entry["token"] == tok.piece(ids[position])
        assert entry["logprob"] == logprob(ids[position], position) < 0
        assert entry["bytes"] == list(entry["token"].encode())
        tops = entry["top_logprobs"]
        assert len(tops) == 3 and tops[0]["token"] == entry["token"]
        assert [t["logprob"] for t in tops] == sorted((t["logprob"] for t in tops), reverse=True)
    assert all(e["top_logprobs"] == [] for e in chat_logprobs(tok, ids, 0, 0)["content"])
    completion = completion_logprobs(tok, ids, 0, 5, 2)
    assert completion["tokens"] == [tok.piece(t) for t in ids]
    texts = completion["tokens"]
    assert completion["text_offset"] == [5 + sum(map(len, texts[:i])) for i in range(4)]
    assert [len(top) for top in completion["top_logprobs"]] == [2] * 4
    assert [len(top) for top in completion_logprobs(tok, ids, 0, 0, 0)["top_logprobs"]] == [1] * 4


@pytest.fixture(scope="module")
def worker() -> Iterator[EmulatorProcess]:
    with emulator(time_scale=0.01) as proc:
        yield proc


async def post(url: str, body: dict[str, Any]) -> Any:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        assert resp.status == 200, await resp.text()
        if body.get("stream"):
            return [json.loads(line[6:]) for line in (await resp.text()).splitlines()
                    if line.startswith("data: {")]
        return await resp.json()


@pytest.mark.integration
async def test_chat_and_completions_answer_the_logprobs_asked(worker: EmulatorProcess) -> None:
    chat = {"model": MODEL, "max_tokens": 6, "logprobs": True, "top_logprobs": 2,
            "messages": [{"role": "user", "content": "hi"}]}
    [choice] = (await post(f"{worker.url}/v1/chat/completions", chat))["choices"]
    content = choice["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == choice["message"]["content"]
    assert len(content) == 6 and all(len(e["top_logprobs"]) == 2 for e in content)
    chunks = await post(f"{worker.url}/v1/chat/completions", {**chat, "stream": True})
    deltas = [ch for c in chunks for ch in c["choices"] if ch.get("logprobs")]
    assert all("".join(e["token"] for e in ch["logprobs"]["content"])
               == ch["delta"]["content"] for ch in deltas)
    assert sum(len(ch["logprobs"]["content"]) for ch in deltas) == 6
    assert (await post(f"{worker.url}/v1/chat/completions",
                       {**chat, "logprobs": False, "top_logprobs": None}))[
        "choices"][0]["logprobs"] is None
    completion = {"model": MODEL, "max_tokens": 5, "prompt": "Once", "logprobs": 1}
    [choice] = (await post(f"{worker.url}/v1/completions", completion))["choices"]
    assert "".join(choice["logprobs"]["tokens"]) == choice["text"]
    chunks = await post(f"{worker.url}/v1/completions", {**completion, "stream": True})
    pieces = [ch for c in chunks for ch in c["choices"] if ch.get("logprobs")]
    offsets = [o for ch in pieces for o in ch["logprobs"]["text_offset"]]
    tokens = [t for ch in pieces for t in ch["logprobs"]["tokens"]]
    assert "".join(tokens) == "".join(ch["text"] for ch in pieces)
    assert offsets == [sum(map(len, tokens[:i])) for i in range(len(tokens))]


def test_alternatives_are_distinct_tokens_however_many_are_asked() -> None:
    """The output vocabulary repeats tokens: at 20 alternatives most entries named one twice
    (a completion's dict then held fewer than asked)."""
    tok = Tokenizer()
    ids = list(tok.output_vocabulary[:10])
    for entry in chat_logprobs(tok, ids, 0, 20)["content"]:
        names = [top["token"] for top in entry["top_logprobs"]]
        assert len(names) == len(set(names)) == 20
    assert all(len(top) == 20 for top in completion_logprobs(tok, ids, 0, 0, 20)["top_logprobs"])


@pytest.mark.integration
async def test_echoed_completions_offsets_point_into_the_text_returned(
        worker: EmulatorProcess) -> None:
    """With echo the text starts with the prompt: the offsets started at 0 (whole) or skipped
    ahead (streamed)."""
    body = {"model": MODEL, "max_tokens": 4, "prompt": "Once upon", "logprobs": 1, "echo": True}
    [choice] = (await post(f"{worker.url}/v1/completions", body))["choices"]
    logprobs = choice["logprobs"]
    for offset, token in zip(logprobs["text_offset"], logprobs["tokens"], strict=True):
        assert choice["text"][offset:offset + len(token)] == token
    chunks = await post(f"{worker.url}/v1/completions", {**body, "stream": True})
    pieces = [ch for c in chunks for ch in c["choices"] if ch.get("logprobs")]
    text = "".join(ch["text"] for ch in pieces)
    for ch in pieces:
        for offset, token in zip(ch["logprobs"]["text_offset"], ch["logprobs"]["tokens"],
                                 strict=True):
            assert text[offset:offset + len(token)] == token
