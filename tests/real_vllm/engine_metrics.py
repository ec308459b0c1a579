"""Read counters and labels from a real vLLM engine's ``/metrics``, and reset its prefix cache
(tests only)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def reset_prefix_caches(urls: list[str]) -> None:
    """Empty each engine's prefix cache (``POST /reset_prefix_cache``, engines in dev mode)."""
    for url in urls:
        request = urllib.request.Request(url + "/reset_prefix_cache", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200


def scrape(url: str) -> dict[str, float]:
    """Every sample of ``url``/metrics summed over label sets, by sample name."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


def families(url: str) -> dict[str, str]:
    """Metric family names of ``url``/metrics with their types."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        text = response.read().decode()
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def cache_config(url: str) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info``."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:cache_config_info":
                return dict(sample.labels)
    return {}
