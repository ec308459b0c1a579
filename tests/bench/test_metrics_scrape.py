"""Counter totals from a live /metrics page, and the router's known-prefix shares."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import pytest

from bench.metrics_scrape import ROUTER_PREFIX_COUNTERS, known_prefix_shares, scrape_totals
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


@pytest.fixture
def page_server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("authorization") != "Bearer t":
                self.send_response(401)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def test_sums_total_samples_sends_headers_and_omits_missing_families(page_server: str) -> None:
    totals = scrape_totals(page_server, ["vllm:prefix_cache_hits", "vllm:prompt_tokens"],
                           {"authorization": "Bearer t"})
    assert totals == {"vllm:prefix_cache_hits": 42.0}


def test_an_unreadable_page_is_none(page_server: str) -> None:
    assert scrape_totals(page_server, ["vllm:prefix_cache_hits"]) is None     # 401
    assert scrape_totals("http://127.0.0.1:9/metrics", ["x"], timeout_s=1.0) is None


def test_known_prefix_shares_from_router_counters() -> None:
    text = RouterMetrics().render().decode()   # every family is on the page from the start
    assert all(f"# TYPE {name}_total counter" in text for name in ROUTER_PREFIX_COUNTERS)
    before = dict.fromkeys(ROUTER_PREFIX_COUNTERS, 100.0)
    after = dict(zip(ROUTER_PREFIX_COUNTERS, (400.0, 700.0, 1100.0), strict=True))
    assert known_prefix_shares(before, after) == (0.3, 0.6)
    assert known_prefix_shares(before, before) == (None, None)       # nothing looked up
    assert known_prefix_shares(None, after) == (None, None)          # not a kvroute router
    assert known_prefix_shares({}, {}) == (None, None)
