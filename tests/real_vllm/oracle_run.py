"""The tenant-pinned oracle of ``prefix-anchors.md`` on running engines (a measurement helper).

Sends the workload of ``workload.py`` straight to the engines, tenant ``t`` always to engine
``t mod 2``, and prints the engines' prefix-cache hit rate over the run (caches reset first):
the same-machine reference for ``test_prefix_affinity.py``.

Usage: ``python tests/real_vllm/oracle_run.py MODEL_DIR URL_A URL_B`` (engines in dev mode).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tests.real_vllm.engine_metrics import reset_prefix_caches, scrape  # noqa: E402
from tests.real_vllm.workload import (  # noqa: E402
    Conversation,
    model_conversations,
    run_workload,
)

HITS, QUERIES = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"


async def oracle_hit_rate(urls: list[str], convs: list[Conversation]
                          ) -> tuple[float, dict[str, int]]:
    """Run ``convs`` tenant-pinned; return the engines' hit rate and requests per engine."""
    def engine(conv: Conversation) -> str:
        return urls[conv.tenant % len(urls)]

    reset_prefix_caches(urls)
    before = {url: scrape(url) for url in urls}
    result = await run_workload(urls[0], "tiny", convs, route=engine)
    after = {url: scrape(url) for url in urls}
    assert result.errors == [], result.errors[:3]
    counts = dict.fromkeys(urls, 0)
    for tenant, _, _ in result.requests:
        counts[urls[tenant % len(urls)]] += 1
    hits = sum(after[u][HITS] - before[u][HITS] for u in urls)
    queries = sum(after[u][QUERIES] - before[u][QUERIES] for u in urls)
    return hits / queries, counts


async def run(model_dir: Path, urls: list[str]) -> str:
    convs = model_conversations(REPO_ROOT.parent / "shared", model_dir)
    hit_rate, counts = await oracle_hit_rate(urls, convs)
    return f"oracle hit rate {hit_rate:.3f} requests {counts}"


if __name__ == "__main__":
    print(asyncio.run(run(Path(sys.argv[1]), sys.argv[2:])))
