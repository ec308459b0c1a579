"""Helpers for the emulator tests: start a worker process, read its /metrics."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from workers.emulator.process import EmulatorProcess

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def emulator(time_scale: float = 0.01, **emulate: Any) -> EmulatorProcess:
    """An H100 Llama-3-8B worker serving ``MODEL`` (start it with ``with``)."""
    return EmulatorProcess(gpu="h100", model="llama-3-8b", served_model_names=[MODEL],
                           time_scale=time_scale, emulate=emulate)


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the one sample ``name`` whose labels include ``labels``."""
    found = [s.value for f in text_string_to_metric_families(text) for s in f.samples
             if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return float(found[0])


def counter(url: str, name: str, extra: Mapping[str, str] | None = None) -> float:
    return sample(metrics_text(url), name, model_name=MODEL, engine="0", **dict(extra or {}))
