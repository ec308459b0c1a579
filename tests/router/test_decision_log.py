"""The JSON decision log: line contents, sampling by request id, configuration errors."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import aiohttp
import pytest

from policies.base import CandidateScore, Decision, RoutingRequest
from router.decision_log import (
    DecisionLogConfig,
    DecisionLogConfigError,
    DecisionLogWriter,
    decision_line,
    sampled,
)
from router.decision_sinks import open_decision_sinks
from router.metrics import RouterMetrics
from router.prefix_ceiling import PrefixCeiling
from router.prefix_choice import PrefixChoice
from router.refusals import RefusalRecord
from tests.router.gateway_support import MODEL, RouterFactory, subset
from workers.fleet import FleetConfig


def _decision(request_id: str = "req-1") -> Decision:
    return Decision(
        request_id=request_id, worker_id="b", model="m", profile="default", rule="gold",
        reason="highest score", filtered_out={"c": "healthy"},
        candidates=(CandidateScore("a", 0.5, {"prefix": 0.25}),
                    CandidateScore("b", 1.5, {"prefix": 1.0})),
        attributes={"decided_by": "prefix", "estimated_ttft_s": 0.125,
                    "bad": math.inf, "obj": object()})


def test_line_holds_the_decision_and_candidates_best_first() -> None:
    request = RoutingRequest(request_id="req-1", model="m", tenant="acme", num_prompt_tokens=42,
                             semantic_class="code", attributes={
                                 "semantic_confidence": 0.8125, "semantic_outcome": "confident"})
    line = decision_line(request, _decision(), 1, 2.5e-5, 1700000000.25, "abc123def456")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {
        "kind": "decision", "ts": 1700000000.25, "request_id": "req-1", "trace_id": None,
        "attempt": 1, "model": "m", "profile": "default", "rule": "gold",
        "routing_sha256": "abc123def456", "worker": "b", "reason_code": "prefix",
        "reason": "highest score", "class": "code", "class_confidence": 0.8125,
        "class_outcome": "confident", "tenant": "acme", "prompt_tokens": 42,
        "decision_us": 25.0,
        "candidates": [{"worker": "b", "total": 1.5, "scores": {"prefix": 1.0}},
                       {"worker": "a", "total": 0.5, "scores": {"prefix": 0.25}}],
        "filtered_out": {"c": "healthy"},
        "attributes": {"decided_by": "prefix", "estimated_ttft_s": 0.125, "bad": None}}


def test_sampling_is_by_request_id() -> None:
    ids = [f"r{i}" for i in range(2000)]
    kept = [i for i in ids if sampled(i, 0.25)]
    assert 400 < len(kept) < 600
    assert kept == [i for i in ids if sampled(i, 0.25)]       # same answer every time
    assert all(sampled(i, 1.0) for i in ids) and not any(sampled(i, 0.0) for i in ids)


def test_writer_writes_only_sampled_requests() -> None:
    stream = io.StringIO()
    writer = DecisionLogWriter(stream, 0.5, clock=lambda: 1.0)
    request = RoutingRequest(request_id="x", model="m")
    ids = [f"id-{i}" for i in range(50)]
    for rid in ids:
        writer.on_decision(request, _decision(rid), 0, 0.0)
    logged = [json.loads(line)["request_id"] for line in stream.getvalue().splitlines()]
    assert logged == [rid for rid in ids if sampled(rid, 0.5)]


def test_refusals_are_logged_and_sampled_as_decisions_are() -> None:
    """By request id, at the decisions' rate: a storm of refusals is thinned alike."""
    stream = io.StringIO()
    writer = DecisionLogWriter(stream, 0.5, clock=lambda: 1.0)
    ids = [f"id-{i}" for i in range(50)]
    for rid in ids:
        writer.on_refusal(RefusalRecord(
            at=2.0, request_id=rid, trace_id=None, tenant="acme", model="m",
            path="/v1/completions", reason="requests_per_minute", status=429,
            message="Rate limit reached", routing_sha256="0123456789ab"))
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["request_id"] for line in lines] == [rid for rid in ids if sampled(rid, 0.5)]
    assert {(line["kind"], line["reason_code"], line["status"]) for line in lines} == {
        ("refusal", "requests_per_minute", 429)}


@pytest.mark.parametrize(("env", "message"), [
    ({"KVROUTE_DECISION_LOG_SAMPLE": "lots"},
     "KVROUTE_DECISION_LOG_SAMPLE: must be a number between 0 and 1, got 'lots'"),
    ({"KVROUTE_DECISION_LOG_SAMPLE": "1.5"},
     "KVROUTE_DECISION_LOG_SAMPLE: must be between 0 and 1, got 1.5"),
])
def test_bad_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(DecisionLogConfigError) as info:
        DecisionLogConfig.from_env(env)
    assert str(info.value) == message


def test_config_from_env() -> None:
    assert DecisionLogConfig.from_env({}) == DecisionLogConfig(None, 1.0)
    assert DecisionLogConfig.from_env({"KVROUTE_DECISION_LOG": " - ",
                                       "KVROUTE_DECISION_LOG_SAMPLE": "0.1"}) == \
        DecisionLogConfig("-", 0.1)


def test_sinks_from_env_append_to_the_file_and_close_it(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    path.write_text('{"earlier": true}\n')
    sinks, refusals, close = open_decision_sinks(RouterMetrics(),
                                                 {"KVROUTE_DECISION_LOG": str(path)})
    assert [type(s) for s in sinks] == [PrefixCeiling, PrefixChoice, DecisionLogWriter]
    assert list(refusals) == [sinks[2]]
    for sink in sinks:
        sink.on_decision(RoutingRequest(request_id="q", model="m"), _decision("q"), 0, 0.0)
    close()
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["request_id"] == "q"


def test_without_a_path_only_the_prefix_sinks_run() -> None:
    sinks, refusals, close = open_decision_sinks(RouterMetrics(),
                                                 {"KVROUTE_DECISION_LOG_SAMPLE": "0.5"})
    assert [type(s) for s in sinks] == [PrefixCeiling, PrefixChoice] and not refusals
    close()


@pytest.mark.integration
async def test_a_log_that_cannot_be_written_never_fails_a_request(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The decision log on a full disk (``/dev/full``: every write fails with ENOSPC): the
    requests are served, the failure is logged once."""
    monkeypatch.setenv("KVROUTE_DECISION_LOG", "/dev/full")
    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            async with session.post(router.url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
    failures = [r for r in caplog.records if "decision sink DecisionLogWriter failed" in
                r.getMessage()]
    assert len(failures) == 1
