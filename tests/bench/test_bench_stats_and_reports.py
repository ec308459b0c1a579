from __future__ import annotations

from pathlib import Path

import orjson

from bench.backends import chat_body
from bench.loadgen import LoadResult, LoadSpec, RequestResult, summarize
from bench.overhead import OverheadConfig, PhaseResult, TargetResult
from bench.overhead_report import markdown_table, write_overhead
from bench.stats import percentile
from bench.targets import Skipped, TargetContext, TargetPlan, plan_target, url_fleet_text
from workers.fleet import load_fleet


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None


def test_summarize_counts_incomplete_streams_as_errors() -> None:
    results = [RequestResult(200, True, 0.010, 0.002, 18),
               RequestResult(200, True, 0.030, 0.004, 18),
               RequestResult(200, False, 0.050, 0.001, 3, error="HTTP 200, done=False")]
    summary = summarize(results, elapsed_s=2.0)
    assert (summary.completed, summary.errors, summary.requests_per_s) == (2, 1, 1.0)
    assert summary.latency_p50_ms == 10.0 and summary.latency_p99_ms == 30.0
    assert summary.ttfc_p50_ms == 2.0 and summary.mean_events == 18.0
    assert summary.first_error == "HTTP 200, done=False"


def test_chat_body_has_the_anchor_size() -> None:
    body = chat_body(stream=True)
    assert len(orjson.dumps(body)) == 1069
    assert body["stream"] is True and body["max_tokens"] == 16


def test_load_spec_round_trips_through_json() -> None:
    spec = LoadSpec(url="http://127.0.0.1:1/v1/chat/completions", body={"a": 1}, stream=True,
                    mode="open", rate=50.0)
    assert LoadSpec.from_json(orjson.loads(orjson.dumps(
        {f: getattr(spec, f) for f in spec.__dataclass_fields__}))) == spec


def test_target_plans(tmp_path: Path) -> None:
    ctx = TargetContext(("http://127.0.0.1:9001", "http://127.0.0.1:9002"), tmp_path / "t")
    direct = plan_target("direct", ctx)
    assert isinstance(direct, TargetPlan) and direct.argv is None
    assert direct.base_url == "http://127.0.0.1:9001"
    kv = plan_target("kvroute-rr", ctx)
    assert isinstance(kv, TargetPlan) and kv.argv is not None
    assert kv.argv[kv.argv.index("--routing") + 1].endswith("config/policies/round-robin.yaml")
    fleet = load_fleet(Path(kv.argv[kv.argv.index("--fleet") + 1]))
    assert [w.info.url for w in fleet.workers] == list(ctx.backends)
    gc_cpython = plan_target("kvroute-gc-cpython", ctx)
    assert isinstance(gc_cpython, TargetPlan) and gc_cpython.argv is not None
    assert gc_cpython.argv[-2:] == ("--gc-interval", "0")
    assert "--gc-interval" not in (plan_target("kvroute", ctx).argv or ())
    for name in ("sglang-router", "vllm-router", "litellm", "nginx"):
        plan = plan_target(name, ctx)
        assert isinstance(plan, (TargetPlan, Skipped)) and plan.name == name
    (tmp_path / "f.yaml").write_text(url_fleet_text(["http://127.0.0.1:5"]))
    assert load_fleet(tmp_path / "f.yaml").workers[0].info.models == ("bench-model",)


def test_overhead_report_files(tmp_path: Path) -> None:
    load = LoadResult(completed=1000, errors=0, elapsed_s=2.0, requests_per_s=500.0,
                      latency_p50_ms=1.5, latency_p99_ms=4.0)
    stream = LoadResult(completed=500, errors=1, elapsed_s=2.0, requests_per_s=250.0,
                        latency_p50_ms=3.0, latency_p99_ms=9.0, ttfc_p50_ms=1.0,
                        ttfc_p99_ms=2.0, mean_events=18.0)
    results = [TargetResult("nginx", non_stream=PhaseResult(load, 0.1, 100.0, 5.0),
                            stream=PhaseResult(stream, 0.2, 400.0, 10.0, 380.0), rss_peak_mb=13.0,
                            idle_cpu_percent=0.5),
               TargetResult("litellm", skipped="not installed (run make bench-setup)")]
    table = markdown_table(results)
    assert ("| nginx | 500 | 1.50 | 4.00 | 5 | 100 | 250 | 1.00 / 2.00 | 3.00 / 9.00 "
            "| 400 (380 net) | 0.5 | 13 | 1 |") in table
    assert "| litellm | skipped: not installed (run make bench-setup) |" in table
    paths = write_overhead(tmp_path, OverheadConfig(targets=("nginx", "litellm")), results,
                           "kvroute bench overhead --out x")
    assert [p.name for p in paths] == ["overhead.json", "overhead.md", "overhead.png"]
    document = orjson.loads(paths[0].read_bytes())
    assert document["results"][0]["non_stream"]["router_cpu_us_per_request"] == 100.0
    assert document["config"]["backend"] == "emulator"
    assert "\n\nBackend: `emulator`: 2 × Python emulated workers" in paths[1].read_text()
    assert paths[2].stat().st_size > 1000
