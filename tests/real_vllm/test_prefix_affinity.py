"""Prefix affinity under cache pressure, measured by the engines' own prefix-cache counters.

The workload of ``prefix-anchors.md`` (8 tenants × 12 two-turn chats, concurrency 4) goes
through kvroute to two real engines with 40-block KV caches. kvroute tokenizes with the tiny
model's own tokenizer and chat template and routes with the ``prefix`` scorer (approximate
index learnt from routing) balanced by ``routed-share``. Reference, same workload shape and
engines: tenant-pinned oracle 82.8 % (mean of two runs), sglang-router ``cache_aware`` 81.8 %
with a 63/37 split, round-robin 53–61 %.

The engines' hit rate moves by a couple of points from run to run on a busy 2-core machine
(the same placement gave 80.1–82.4 %), so the bar is the oracle measured here, on the same
engines in the same minutes: kvroute must reach 0.95 × that. A bar of 0.97 × failed once with
every tenant on one engine, four each, as the oracle places them (79.2 % against the
oracle's 81.9 %, 0.967 ×, a clean-clone CI run on 2026-12-03): the two runs' noise adds up.
Round-robin reaches 53–61 %, about 0.7 × the oracle, so the bar still tells affinity from
none. The published anchors are printed beside it for comparison. sglang-router
``cache_aware`` on the same engines (``peer_compare.py``, docs/benchmarks.md) was below
kvroute in two rounds of three and 0.5 pp above it in the third (when it places the tenants
evenly it reaches the oracle's level): a measurement, not a bound here.
"""

from __future__ import annotations

from collections import Counter

from tests.real_vllm.conftest import MODEL, SHARED_DIR, RealFleet, RouterFactory, prefix_routing
from tests.real_vllm.engine_metrics import scrape
from tests.real_vllm.oracle_run import oracle_hit_rate
from tests.real_vllm.workload import model_conversations, run_workload

ORACLE_HIT_RATE = 0.828
SGLANG_CACHE_AWARE_HIT_RATE = 0.818
HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"


async def test_prefix_affinity_under_cache_pressure(real_fleet: RealFleet,
                                                    make_router: RouterFactory) -> None:
    convs = model_conversations(SHARED_DIR, real_fleet.model_dir)
    oracle, oracle_counts = await oracle_hit_rate(list(real_fleet.urls), convs)
    router = await make_router(prefix_routing(real_fleet.model_dir))
    real_fleet.reset_prefix_caches()
    before = {url: scrape(url) for url in real_fleet.urls}
    result = await run_workload(router.url, MODEL, convs)
    after = {url: scrape(url) for url in real_fleet.urls}

    assert result.errors == []
    assert len(result.requests) == 192
    hits = sum(after[u][HITS] - before[u][HITS] for u in real_fleet.urls)
    queries = sum(after[u][QUERIES] - before[u][QUERIES] for u in real_fleet.urls)
    hit_rate = hits / queries
    per_worker = Counter(worker for _, worker, _ in result.requests)
    tenants = {w: sorted({t for t, worker, _ in result.requests if worker == w})
               for w in per_worker}
    summary = (f"hit rate {hit_rate:.3f} ({hits:.0f}/{queries:.0f} tokens), requests "
               f"{dict(per_worker)}, tenants {tenants}; oracle here {oracle:.3f} "
               f"{oracle_counts}; published oracle {ORACLE_HIT_RATE}, "
               f"sglang-router cache_aware {SGLANG_CACHE_AWARE_HIT_RATE}")
    print(summary)
    assert hit_rate >= 0.95 * oracle, summary
    assert set(per_worker) == {w.info.id for w in real_fleet.fleet.workers}, summary
    for count in per_worker.values():
        assert 0.45 <= count / len(result.requests) <= 0.55, summary
