"""Counter totals from a live /metrics page, and the router's known-prefix shares."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

from bench.metrics_scrape import (
    GcPauseTotals,
    KnownPrefix,
    RouterPrefixCounters,
    gc_pauses_between,
    known_prefix,
    scrape_router_gc,
    scrape_router_prefix,
    scrape_totals,
)
from router.metrics import RouterMetrics

PAGE = b"""# HELP vllm:prefix_cache_hits_total Prefix cache hits, in cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 30.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 12.0
# HELP vllm:prefix_cache_hits_created Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_created gauge
vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
"""
AUTH = {"authorization": "Bearer t"}


@contextmanager
def serving(body: Callable[[], bytes], token: str | None = None) -> Iterator[str]:
    """A /metrics page on 127.0.0.1 returning ``body()`` (401 without ``token`` when one is
    set), stopped on exit; yields its URL."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if token is not None and self.headers.get("authorization") != f"Bearer {token}":
                self.send_response(401)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.end_headers()
            self.wfile.write(body())

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_sums_total_samples_sends_headers_and_omits_missing_families() -> None:
    with serving(lambda: PAGE, token="t") as url:
        totals = scrape_totals(url, ["vllm:prefix_cache_hits", "vllm:prompt_tokens"], AUTH)
    assert totals == {"vllm:prefix_cache_hits": 42.0}


def test_an_unreadable_page_is_none() -> None:
    with serving(lambda: PAGE, token="t") as url:
        assert scrape_totals(url, ["vllm:prefix_cache_hits"]) is None     # 401
    assert scrape_totals("http://127.0.0.1:9/metrics", ["x"], timeout_s=1.0) is None


def test_router_prefix_counters_from_a_live_router_page() -> None:
    metrics = RouterMetrics()
    with serving(metrics.render) as url:
        before = scrape_router_prefix(url)
        assert before == RouterPrefixCounters({}, {}, 0.0)   # families there, no samples yet
        metrics.record_prefix_choice(512, 512, "prefix")
        metrics.record_prefix_choice(0, 1024, "load")
        metrics.record_prefix_choice(256, 512, "slo-fallback")
        metrics.record_prefix_ceiling(0, 4000)
        after = scrape_router_prefix(url)
    known = known_prefix(before, after)
    assert known == KnownPrefix(chosen=0.192, best=0.512,
                                passed_over_by_term={"load": 0.256, "slo-fallback": 0.064})
    assert known_prefix(after, after) is None                  # nothing looked up
    assert known_prefix(None, after) is None                   # not a kvroute router
    with serving(lambda: PAGE) as url:                         # a worker's page is not a
        assert scrape_router_prefix(url) is None               # router's


def test_router_gc_pauses_between_two_scrapes_by_generation() -> None:
    metrics = RouterMetrics()
    with serving(metrics.render) as url:
        before = scrape_router_gc(url)
        assert before == {g: GcPauseTotals() for g in "012"}    # the series exist at 0
        young = metrics.gc_pause.labels("0")
        young.observe(0.0002)
        young.observe(0.0003)
        full = metrics.gc_pause.labels("2")
        full.observe(0.004)
        full.observe(0.03)           # over 10 ms
        after = scrape_router_gc(url)
    pauses = gc_pauses_between(before, after)
    assert pauses["0"].collections == 2 and pauses["0"].over_10ms == 0
    assert abs(pauses["0"].seconds - 0.0005) < 1e-12
    assert pauses["2"].collections == 2 and pauses["2"].over_10ms == 1
    assert pauses["1"] == GcPauseTotals()
    assert gc_pauses_between(None, after) == {}
    with serving(lambda: PAGE) as url:            # a worker's page has no such histogram
        assert scrape_router_gc(url) is None
