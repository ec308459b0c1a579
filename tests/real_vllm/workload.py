"""The multi-tenant chat workload of ``shared/reference/prefix-anchors.md``, and its client.

8 tenants, each with a ~1,200-token system prompt made of distinct Bitext customer-support
responses behind a tenant-specific header; 12 two-turn MT-Bench conversations per tenant
(96 in all, one seeded global shuffle); 4 client workers each take the next conversation,
send turn 1, wait, then send turn 2 with the real turn-1 answer: 192 requests,
``max_tokens=16``, ``temperature=0``, no streaming. Token lengths are measured with the served
model's own tokenizer and chat template (``count_tokens``), so prompts land at 1,150–1,240
tokens as in the reference runs.
"""

from __future__ import annotations

import asyncio
import csv
import gzip
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from policies.producers.model_tokenizer import ModelTokenizer

SEED = 20261129
TENANTS = 8
CONVERSATIONS_PER_TENANT = 12
CONCURRENCY = 4
MAX_TOKENS = 16
SYSTEM_MIN_TOKENS = 1152
SYSTEM_MAX_TOKENS = 1236


@dataclass(frozen=True, slots=True)
class Conversation:
    tenant: int
    system: str
    turns: tuple[str, str]


@dataclass(slots=True)
class RunResult:
    """Per-request outcome: (tenant, worker id from x-kvroute-worker, HTTP status)."""

    requests: list[tuple[int, str, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def system_prompts(shared: Path, count_tokens: Callable[[str], int]) -> list[str]:
    """One system prompt per tenant, 1,152–1,236 tokens when rendered as ``system: …\\n``."""
    with gzip.open(shared / "traces/prompts/bitext_customer_support_4.5k.csv.gz", "rt") as f:
        responses = sorted({row["response"].strip() for row in csv.DictReader(f)})
    rng = random.Random(SEED)
    rng.shuffle(responses)
    prompts: list[str] = []
    pool = iter(responses)
    for tenant in range(TENANTS):
        text = (f"You are the support assistant of tenant {tenant} (ACME-{tenant:02d} Retail). "
                "Answer in the style of these reference replies.\n")
        while True:
            candidate = text + "\n" + next(pool)
            if count_tokens(candidate) > SYSTEM_MAX_TOKENS:
                if count_tokens(text) >= SYSTEM_MIN_TOKENS:
                    break
                continue            # too long a reply for the remaining room: try the next
            text = candidate
        prompts.append(text)
    return prompts


def conversations(shared: Path, prompts: list[str]) -> list[Conversation]:
    lines = (shared / "traces/prompts/mt_bench_questions.jsonl").read_text().splitlines()
    questions = [json.loads(line)["turns"] for line in lines if line.strip()]
    rng = random.Random(SEED)
    convs = [Conversation(tenant, prompts[tenant], (q[0], q[1]))
             for tenant in range(TENANTS)
             for q in rng.sample(questions, CONVERSATIONS_PER_TENANT)]
    rng.shuffle(convs)
    return convs


def model_conversations(shared: Path, model_dir: Path) -> list[Conversation]:
    """The workload with system prompts sized by the served model's tokenizer and template."""
    tokenizer = ModelTokenizer.from_dir(model_dir)
    prompts = system_prompts(shared, lambda text: len(tokenizer.encode(
        tokenizer.render_chat([{"role": "system", "content": text}], False), False)))
    return conversations(shared, prompts)


async def run_workload(base_url: str, model: str, convs: list[Conversation],
                       timeout_s: float = 180.0,
                       route: Callable[[Conversation], str] | None = None) -> RunResult:
    """Send every conversation through ``base_url`` (or ``route(conversation)``, e.g. an
    engine chosen per tenant) with ``CONCURRENCY`` client workers."""
    result = RunResult()
    queue: asyncio.Queue[Conversation] = asyncio.Queue()
    for conv in convs:
        queue.put_nowait(conv)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def chat(conv: Conversation, messages: list[dict[str, str]]) -> str:
            body: dict[str, Any] = {"model": model, "messages": messages,
                                    "max_tokens": MAX_TOKENS, "temperature": 0}
            url = route(conv) if route is not None else base_url
            async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
                worker = resp.headers.get("x-kvroute-worker", "")
                result.requests.append((conv.tenant, worker, resp.status))
                data = await resp.json(content_type=None)
                if resp.status != 200:
                    result.errors.append(f"{resp.status}: {data}")
                    return ""
                return str(data["choices"][0]["message"]["content"] or "")

        async def client() -> None:
            while not queue.empty():
                conv = queue.get_nowait()
                messages = [{"role": "system", "content": conv.system},
                            {"role": "user", "content": conv.turns[0]}]
                answer = await chat(conv, messages)
                messages += [{"role": "assistant", "content": answer},
                             {"role": "user", "content": conv.turns[1]}]
                await chat(conv, messages)

        await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
    return result
