"""router/dashboard/prometheus_api.py against a stand-in Prometheus on loopback."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from router.dashboard.prometheus_api import PrometheusClient
from tests.workers.proxy_support import set_dead_proxy, unused_port


class _Prometheus(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"status": "success", "data": ["w0", "w1"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", unused_port()), _Prometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_prometheus_is_reached_directly_whatever_http_proxy_says(
        prometheus: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under HTTP_PROXY with no NO_PROXY its queries went to the proxy and failed."""
    set_dead_proxy(monkeypatch)
    assert PrometheusClient(prometheus, timeout_s=5.0).label_values("worker") == ["w0", "w1"]
