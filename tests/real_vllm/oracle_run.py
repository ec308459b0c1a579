"""The tenant-pinned oracle of ``prefix-anchors.md`` on running engines (a measurement helper).

Sends the workload of ``workload.py`` straight to the engines, tenant ``t`` always to engine
``t mod 2``, and prints the engines' prefix-cache hit rate over the run (caches reset first):
the same-machine reference for ``test_prefix_affinity.py``.

Usage: ``python tests/real_vllm/oracle_run.py MODEL_DIR URL_A URL_B`` (engines in dev mode).
"""

from __future__ import annotations

import asyncio
import sys
import urllib.request
from pathlib import Path

import aiohttp

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from policies.producers.model_tokenizer import ModelTokenizer  # noqa: E402
from tests.real_vllm.engine_metrics import scrape  # noqa: E402
from tests.real_vllm.workload import (  # noqa: E402
    CONCURRENCY,
    MAX_TOKENS,
    conversations,
    system_prompts,
)

HITS, QUERIES = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"


async def oracle_hit_rate(model_dir: Path, urls: list[str]) -> tuple[float, dict[str, int]]:
    """Run the workload tenant-pinned; return the engines' hit rate and requests per engine."""
    tokenizer = ModelTokenizer.from_dir(model_dir)
    convs = conversations(REPO_ROOT.parent / "shared", system_prompts(
        REPO_ROOT.parent / "shared", lambda text: len(tokenizer.encode(
            tokenizer.render_chat([{"role": "system", "content": text}], False), False))))
    for url in urls:
        request = urllib.request.Request(url + "/reset_prefix_cache", method="POST")
        urllib.request.urlopen(request, timeout=30).read()
    before = {url: scrape(url) for url in urls}
    counts = dict.fromkeys(urls, 0)
    timeout = aiohttp.ClientTimeout(total=180)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def chat(url: str, messages: list[dict[str, str]]) -> str:
            counts[url] += 1
            body = {"model": "tiny", "messages": messages, "max_tokens": MAX_TOKENS,
                    "temperature": 0}
            async with session.post(url + "/v1/chat/completions", json=body) as resp:
                data = await resp.json()
                return str(data["choices"][0]["message"]["content"] or "")

        async def client() -> None:
            while convs:
                conv = convs.pop(0)
                url = urls[conv.tenant % len(urls)]
                messages = [{"role": "system", "content": conv.system},
                            {"role": "user", "content": conv.turns[0]}]
                answer = await chat(url, messages)
                await chat(url, [*messages, {"role": "assistant", "content": answer},
                                 {"role": "user", "content": conv.turns[1]}])

        await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
    after = {url: scrape(url) for url in urls}
    hits = sum(after[u][HITS] - before[u][HITS] for u in urls)
    queries = sum(after[u][QUERIES] - before[u][QUERIES] for u in urls)
    return hits / queries, counts


async def run(model_dir: Path, urls: list[str]) -> str:
    hit_rate, counts = await oracle_hit_rate(model_dir, urls)
    return f"oracle hit rate {hit_rate:.3f} requests {counts}"


if __name__ == "__main__":
    print(asyncio.run(run(Path(sys.argv[1]), sys.argv[2:])))
