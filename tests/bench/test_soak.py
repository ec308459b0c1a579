"""``bench.soak``: a real ``kvroute up`` on free ports answers requests that are all different,
the router's own memory is sampled (its emulated workers apart), every answer is accounted
for, and everything is stopped."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from bench.launch import REPO_ROOT
from bench.proc_stats import process_rss_bytes, rss_bytes
from bench.soak import (
    DEFAULT_FLEET,
    RESPONSES_EVERY,
    STREAM_EVERY,
    Sample,
    SoakResult,
    inflight_requests,
    request_of,
    run,
)


def _children() -> list[int]:
    pid = os.getpid()
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _args(tmp_path: Path, requests: int = 90, sample_every: int = 30,
          fleet: Path = DEFAULT_FLEET) -> argparse.Namespace:
    return argparse.Namespace(fleet=fleet, routing=REPO_ROOT / "config" / "routing.yaml",
                              requests=requests, concurrency=4, sample_every=sample_every,
                              seed=0, out=tmp_path / "out")


@pytest.mark.integration
def test_every_request_is_answered_and_the_routers_memory_is_sampled(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = set(_children())
    assert run(_args(tmp_path)) == 0
    report = json.loads((tmp_path / "out" / "soak.json").read_text())
    assert report["errors"] == 0, report["first_error"]
    assert [s["answered"] for s in report["samples"]] == [30, 60, 90]
    # a Python router with its policy loaded holds tens of MiB; its process alone is sampled
    assert all(20 < s["rss_mib"] < 2048 for s in report["samples"])
    assert report["inflight_after"] == 0.0     # exported, and nothing left counted in flight
    assert (tmp_path / "out" / "soak.png").stat().st_size > 0
    assert "| 90 |" in capsys.readouterr().out
    assert set(_children()) <= before     # kvroute up and its emulated workers were stopped


def test_a_process_alone_is_measured_apart_from_its_children() -> None:
    own = process_rss_bytes(os.getpid())
    assert own > 0
    tree = rss_bytes(os.getpid())
    # the tree holds this process; its RSS may shrink between two reads (pages returned)
    assert tree >= min(own, process_rss_bytes(os.getpid()))
    assert process_rss_bytes(2 ** 22 + 1) == 0      # no such process (above pid_max)


def test_no_two_requests_share_a_prompt_and_the_mix_is_as_documented() -> None:
    requests = [request_of(n, "m", seed=0) for n in range(60)]
    texts = [body["input"] if path == "/v1/responses" else body["messages"][0]["content"]
             for path, body in requests]
    assert len(set(texts)) == 60
    assert all(20 <= len(text.split()) - 1 <= 400 for text in texts)
    assert [n for n, (path, _) in enumerate(requests) if path == "/v1/responses"] == list(
        range(0, 60, RESPONSES_EVERY))
    assert [n for n, (_, body) in enumerate(requests) if body["stream"]] == list(
        range(0, 60, STREAM_EVERY))
    assert request_of(7, "m", seed=0) == request_of(7, "m", seed=0)
    assert request_of(7, "m", seed=0) != request_of(7, "m", seed=1)


def test_inflight_requests_sums_the_workers_series_and_tells_when_there_is_none() -> None:
    exposition = "\n".join([
        '# TYPE kvroute_worker_requests gauge',
        'kvroute_worker_requests{gpu="h100",model="m",state="running",worker="w0"} 5.0',
        'kvroute_worker_requests{gpu="h100",model="m",state="inflight",worker="w0"} 2.0',
        'kvroute_worker_requests{gpu="h100",model="m",state="inflight",worker="w1"} 1.0',
    ])
    assert inflight_requests(exposition) == 3.0
    assert inflight_requests("kvroute_requests_total 4.0") is None


def test_growth_is_read_from_the_middle_of_the_run_to_its_end() -> None:
    result = SoakResult(40_000, 8, [Sample(10_000, 1.0, 100.0), Sample(20_000, 2.0, 150.0),
                                    Sample(30_000, 3.0, 152.0), Sample(40_000, 4.0, 154.0)])
    assert result.peak_rss_mib == 154.0
    assert result.growth_second_half_mib_per_10k == pytest.approx(2.0)
    assert SoakResult(1, 1, [Sample(1, 0.1, 50.0)]).growth_second_half_mib_per_10k == 0.0


EMBEDDINGS_ONLY = """
models:
  Qwen/Qwen3-Embedding-0.6B: {arch: qwen3-embedding-0.6b, max_model_len: 8192}
workers:
  - {id: embed-0, gpu: h100, models: [Qwen/Qwen3-Embedding-0.6B], emulate: {port: 8403}}
"""


@pytest.mark.parametrize(("requests", "sample_every", "fleet_text", "message"), [
    (0, 10, None, "--requests: must be >= 1, got 0"),
    (10, 0, None, "--sample-every: must be >= 1, got 0"),
    (10, 10, EMBEDDINGS_ONLY, "no worker serves a generative model"),
])
def test_bad_options_exit_2_before_starting_anything(
        tmp_path: Path, requests: int, sample_every: int, fleet_text: str | None,
        message: str, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = DEFAULT_FLEET
    if fleet_text is not None:
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(fleet_text)
    assert run(_args(tmp_path, requests, sample_every, fleet)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
