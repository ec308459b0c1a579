"""The upstream-client benchmark measures both clients against its own server process."""

from __future__ import annotations

import json
from pathlib import Path

from bench.upstream import main, markdown


def test_both_clients_are_measured_on_whole_and_streamed_answers(tmp_path: Path) -> None:
    assert main(["--requests", "64", "--concurrency", "4", "--rounds", "1",
                 "--client-cpu", "", "--server-cpu", "", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "upstream.json").read_text())
    samples = report["client_cpu_us_per_request"]
    assert sorted(samples) == ["aiohttp-stream", "aiohttp-whole", "upstream-stream",
                               "upstream-whole"]
    assert all(len(values) == 1 and values[0] > 0 for values in samples.values())
    table = markdown(report).splitlines()
    assert table[2].startswith("| JSON, read whole |")
    assert table[3].startswith("| SSE, 18 events |")


def test_tls_adds_the_client_over_tls(tmp_path: Path) -> None:
    assert main(["--requests", "64", "--concurrency", "4", "--rounds", "1", "--tls",
                 "--client-cpu", "", "--server-cpu", "", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "upstream.json").read_text())
    samples = report["client_cpu_us_per_request"]
    assert {"upstream-tls-whole", "upstream-tls-stream"} <= set(samples)
    assert all(len(values) == 1 and values[0] > 0 for values in samples.values())
    header = markdown(report).splitlines()[0]
    assert header.endswith("| UpstreamClient over TLS µs |")
