"""The JSON decision log: line contents, sampling by request id, configuration errors."""

from __future__ import annotations

import asyncio
import io
import json
import math
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from policies.base import CandidateScore, Decision, RoutingRequest
from router.decision_log import (
    DecisionLogConfig,
    DecisionLogConfigError,
    DecisionLogWriter,
    RefusalThrottle,
    decision_line,
    outcome_line,
    sampled,
)
from router.decision_sinks import decision_log_problem, open_decision_sinks
from router.metrics import RouterMetrics
from router.prefix_ceiling import PrefixCeiling
from router.prefix_choice import PrefixChoice
from router.refusals import RefusalRecord
from tests.router.gateway_support import (
    MODEL,
    REPO_ROOT,
    ROUTING_ROUND_ROBIN,
    RouterFactory,
    subset,
)
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
                                 "semantic_confidence": 0.8125, "semantic_predicted": "code",
                                 "semantic_outcome": "confident"})
    line = decision_line(request, _decision(), 1, 2.5e-5, 1700000000.25, "abc123def456")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {
        "kind": "decision", "ts": 1700000000.25, "request_id": "req-1", "trace_id": None,
        "attempt": 1, "model": "m", "profile": "default", "rule": "gold",
        "routing_sha256": "abc123def456", "worker": "b", "reason_code": "prefix",
        "reason": "highest score", "class": "code", "class_confidence": 0.8125,
        "class_predicted": "code", "class_outcome": "confident", "tenant": "acme",
        "prompt_tokens": 42, "decision_us": 25.0,
        "candidates": [{"worker": "b", "total": 1.5, "scores": {"prefix": 1.0}},
                       {"worker": "a", "total": 0.5, "scores": {"prefix": 0.25}}],
        "filtered_out": {"c": "healthy"},
        "attributes": {"decided_by": "prefix", "estimated_ttft_s": 0.125, "bad": None}}


def test_an_outcome_line_says_how_the_attempt_ended_and_follows_its_decisions_sampling(
        ) -> None:
    request = RoutingRequest(request_id="req-1", model="m", tenant="acme",
                             headers={"traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"})
    ended = {"status": 200, "ttft_s": 0.125, "tpot_s": 0.0125, "e2e_s": 0.5, "client_s": 0.625,
             "prompt_tokens": 42, "completion_tokens": 9}
    assert json.loads(outcome_line(request, _decision(), 1, ended, 1700000000.25)) == {
        "kind": "outcome", "ts": 1700000000.25, "request_id": "req-1", "trace_id": "ab" * 16,
        "attempt": 1, "model": "m", "worker": "b", "tenant": "acme", **ended}
    stream = io.StringIO()
    writer = DecisionLogWriter(stream, 0.5, clock=lambda: 1.0)
    ids = [f"id-{i}" for i in range(50)]
    for rid in ids:
        writer.on_outcome(request, _decision(rid), 0, ended)
    assert [line["request_id"] for line in _lines(stream)] == [
        rid for rid in ids if sampled(rid, 0.5)]


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


def _refused(request_id: str = "same-id", at: float = 2.0, tenant: str | None = "acme",
             reason: str = "requests_per_minute") -> RefusalRecord:
    return RefusalRecord(
        at=at, request_id=request_id, trace_id=None, tenant=tenant, model="m",
        path="/v1/completions", reason=reason, status=429, message="Rate limit reached",
        routing_sha256="0123456789ab")


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_refusals_are_drawn_one_by_one_not_by_request_id() -> None:
    """Sampled by the crc of a client's request id, a client retrying under one id after its
    429 had every retry logged, or none."""
    stream = io.StringIO()
    draws = iter([0.1, 0.9, 0.3, 0.7, 0.49, 0.5])
    writer = DecisionLogWriter(stream, 0.5, clock=lambda: 1.0, draw=lambda: next(draws))
    for second in range(6):       # one a second: the throttle lets each through
        writer.on_refusal(_refused(at=10.0 + second))
    lines = _lines(stream)
    assert [line["ts"] for line in lines] == [10.0, 12.0, 14.0]
    assert {(line["kind"], line["request_id"], line["reason_code"], line["status"])
            for line in lines} == {("refusal", "same-id", "requests_per_minute", 429)}


def test_refusals_have_a_share_of_their_own() -> None:
    """A storm of refusals could only be thinned with the decisions."""
    stream = io.StringIO()
    writer = DecisionLogWriter(stream, 1.0, clock=lambda: 1.0, refusal_rate=0.0,
                               draw=lambda: 0.0)
    writer.on_refusal(_refused())
    writer.on_decision(RoutingRequest(request_id="x", model="m"), _decision("d-1"), 0, 0.0)
    assert [line["kind"] for line in _lines(stream)] == ["decision"]
    stream = io.StringIO()
    writer = DecisionLogWriter(stream, 0.0, clock=lambda: 1.0, refusal_rate=1.0)
    writer.on_refusal(_refused())
    writer.on_decision(RoutingRequest(request_id="x", model="m"), _decision("d-1"), 0, 0.0)
    assert [line["kind"] for line in _lines(stream)] == ["refusal"]


def test_a_storm_of_one_tenants_refusals_writes_a_bounded_log() -> None:
    """A line per refusal: 10,000 429s a second wrote 14 GB an hour. Past the limit of a
    second, the refusals of a (tenant, reason) are counted in one line."""
    now = [100.5]
    stream = io.StringIO()
    writer = DecisionLogWriter(stream, clock=lambda: now[0], refusals_per_second=3)
    for i in range(1000):
        writer.on_refusal(_refused(f"a-{i}", at=100.0 + i / 2000))
    writer.on_refusal(_refused("b-0", at=100.9, tenant="globex"))    # another tenant's own
    writer.on_refusal(_refused("a-q", at=100.9, reason="queue_full"))   # another reason's
    assert [line["request_id"] for line in _lines(stream)] == [
        "a-0", "a-1", "a-2", "b-0", "a-q"]
    writer.on_refusal(_refused("a-next", at=101.2))     # the next second: the count, once
    lines = _lines(stream)[5:]
    assert lines[0] == {"kind": "refusals_suppressed", "ts": 100, "tenant": "acme",
                        "reason_code": "requests_per_minute", "suppressed": 997, "limit": 3}
    assert [line.get("request_id") for line in lines] == [None, "a-next"]
    for i in range(5):
        writer.on_refusal(_refused(f"c-{i}", at=101.5))
    now[0] = 102.1           # a sampled decision of a later second writes the count too
    writer.on_decision(RoutingRequest(request_id="x", model="m"), _decision("d-1"), 0, 0.0)
    lines = _lines(stream)[9:]         # after a-next, c-0 and c-1
    assert [(line["kind"], line.get("suppressed")) for line in lines] == [
        ("refusals_suppressed", 3), ("decision", None)]
    for i in range(4):
        writer.on_refusal(_refused(f"e-{i}", at=102.5))
    writer.close()           # the router stops: the second under way is counted
    assert _lines(stream)[-1]["suppressed"] == 1
    writer.close()
    assert _lines(stream)[-1]["suppressed"] == 1         # once


def test_the_throttle_tells_apart_a_bounded_number_of_tenants() -> None:
    throttle = RefusalThrottle(per_second=1, max_keys=2)
    throttle.turn(5)
    assert throttle.allow("t1", "requests_per_minute")
    assert throttle.allow("t2", "requests_per_minute")
    assert throttle.allow("t3", "requests_per_minute")       # the first of OTHER's
    assert not throttle.allow("t4", "requests_per_minute")   # OTHER's limit, shared
    assert not throttle.allow("t1", "requests_per_minute")
    assert [json.loads(line) for line in throttle.turn(6)] == [
        {"kind": "refusals_suppressed", "ts": 5, "tenant": "t1",
         "reason_code": "requests_per_minute", "suppressed": 1, "limit": 1},
        {"kind": "refusals_suppressed", "ts": 5, "tenant": "(other)",
         "reason_code": "requests_per_minute", "suppressed": 1, "limit": 1}]
    assert throttle.allow("t4", "requests_per_minute")       # a new second, counted anew
    assert throttle.turn(7) == []


def test_a_storm_over_many_tenants_writes_at_most_the_total() -> None:
    """The tenant is the client's x-tenant: 20,000 refusals in a second over 5,000 tenants
    wrote 4,107 lines (10 a second for each of 1,025 pairs). The total limit (default 100)
    holds them all, and the refusals it held back are counted in one line."""
    stream = io.StringIO()
    writer = DecisionLogWriter(stream, clock=lambda: 100.5)
    for i in range(20_000):
        writer.on_refusal(_refused(f"r-{i}", at=100.0 + i / 40_000, tenant=f"t{i % 5000}"))
    writer.on_refusal(_refused("next", at=101.0))
    lines = _lines(stream)
    refusals = [line for line in lines[:-1] if line["kind"] == "refusal"]
    assert len(refusals) == 100 and len(lines) == 102
    assert lines[100] == {"kind": "refusals_suppressed_total", "ts": 100,
                          "suppressed": 19_900, "limit": 100}
    assert lines[101]["request_id"] == "next"
    assert len(stream.getvalue().encode()) < 64 * 1024


def test_each_refusal_held_back_is_counted_once() -> None:
    """Past its own limit a (tenant, reason) counts its refusals; within it, but past the
    total, the total counts them; a tenant first seen past the total adds no pair."""
    stream = io.StringIO()
    writer = DecisionLogWriter(stream, clock=lambda: 7.5, refusals_per_second=3,
                               refusal_lines_per_second=5)
    for i in range(10):
        writer.on_refusal(_refused(f"a-{i}", at=7.1))
    for i in range(10):
        writer.on_refusal(_refused(f"g-{i}", at=7.2, tenant="globex"))
    for i in range(10):
        writer.on_refusal(_refused(f"n-{i}", at=7.3, tenant=f"new-{i}"))
    writer.close()
    lines = _lines(stream)
    assert [line["request_id"] for line in lines[:5]] == ["a-0", "a-1", "a-2", "g-0", "g-1"]
    assert lines[5:] == [
        {"kind": "refusals_suppressed", "ts": 7, "tenant": "acme",
         "reason_code": "requests_per_minute", "suppressed": 7, "limit": 3},
        {"kind": "refusals_suppressed_total", "ts": 7, "suppressed": 18, "limit": 5}]


def test_the_throttle_keeps_pairs_only_for_lines_written() -> None:
    """Memory and the count lines of a second stay bounded by the total whatever the
    tenants: at most total // per_second pairs can have refusals of their own to count."""
    throttle = RefusalThrottle(per_second=2, total_per_second=10)
    for i in range(5000):
        throttle.allow(f"t{i % 5}", "requests_per_minute")     # 5 pairs use the 10 lines
    for i in range(5000):
        throttle.allow(f"u{i}", "queue_full")                 # each new: no line left
    assert throttle.pairs == 5
    lines = [json.loads(line) for line in throttle.turn(1)]
    assert [(line["kind"], line.get("tenant"), line["suppressed"]) for line in lines] == [
        ("refusals_suppressed", f"t{i}", 998) for i in range(5)] + [
        ("refusals_suppressed_total", None, 5000)]


async def test_the_count_is_written_after_a_storm_without_new_traffic(tmp_path: Path) -> None:
    """The count was written only by a later refusal or sampled decision (or at the stop):
    hours late after a lone storm, lost if the router was killed. A timer writes it within
    about a second of the end of the second it counts."""
    path = tmp_path / "decisions.jsonl"
    _, refusals, close, _ = open_decision_sinks(RouterMetrics(), {
        "KVROUTE_DECISION_LOG": str(path),
        "KVROUTE_DECISION_LOG_REFUSALS_PER_SECOND": "2"}, asyncio.get_running_loop())
    start = time.time()
    for i in range(50):
        refusals[0].on_refusal(_refused(f"s-{i}", at=start))
    lines: list[dict[str, Any]] = []
    while time.time() - start < 2.0:                  # silence: no refusal, no decision
        await asyncio.sleep(0.05)
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        if len(lines) > 2:
            break
    assert [line["kind"] for line in lines] == ["refusal", "refusal", "refusals_suppressed"]
    assert lines[2]["ts"] == int(start) and lines[2]["suppressed"] == 48
    assert time.time() < int(start) + 2.0          # soon after the second ended
    close()
    await asyncio.sleep(0.1)
    assert len(path.read_text().splitlines()) == 3       # written once


async def test_the_timer_waits_for_the_end_of_the_second_counted() -> None:
    """The second is the wall clock's: a timer that fires before it ends (the event loop's
    clock and the wall clock differ) is set again, and writes the count once it has ended."""
    now = [5.95]
    stream = io.StringIO()
    writer = DecisionLogWriter(stream, clock=lambda: now[0], refusals_per_second=1,
                               loop=asyncio.get_running_loop())
    writer.on_refusal(_refused("a", at=5.9))
    writer.on_refusal(_refused("b", at=5.9))        # suppressed: a timer in about 0.1 s
    await asyncio.sleep(0.3)
    assert [line["kind"] for line in _lines(stream)] == ["refusal"]    # 5 is not over
    now[0] = 6.01
    await asyncio.sleep(0.3)
    assert _lines(stream)[1:] == [{"kind": "refusals_suppressed", "ts": 5, "tenant": "acme",
                                   "reason_code": "requests_per_minute", "suppressed": 1,
                                   "limit": 1}]
    writer.close()
    assert len(_lines(stream)) == 2


@pytest.mark.parametrize(("env", "message"), [
    ({"KVROUTE_DECISION_LOG_SAMPLE": "lots"},
     "KVROUTE_DECISION_LOG_SAMPLE: must be a number between 0 and 1, got 'lots'"),
    ({"KVROUTE_DECISION_LOG_SAMPLE": "1.5"},
     "KVROUTE_DECISION_LOG_SAMPLE: must be between 0 and 1, got 1.5"),
    ({"KVROUTE_DECISION_LOG_REFUSAL_SAMPLE": "some"},
     "KVROUTE_DECISION_LOG_REFUSAL_SAMPLE: must be a number between 0 and 1, got 'some'"),
    ({"KVROUTE_DECISION_LOG_REFUSAL_SAMPLE": "-0.5"},
     "KVROUTE_DECISION_LOG_REFUSAL_SAMPLE: must be between 0 and 1, got -0.5"),
    ({"KVROUTE_DECISION_LOG_REFUSALS_PER_SECOND": "2.5"},
     "KVROUTE_DECISION_LOG_REFUSALS_PER_SECOND: must be a whole number of 1 or more, "
     "got '2.5'"),
    ({"KVROUTE_DECISION_LOG_REFUSALS_PER_SECOND": "0"},
     "KVROUTE_DECISION_LOG_REFUSALS_PER_SECOND: must be 1 or more, got 0"),
    ({"KVROUTE_DECISION_LOG_REFUSAL_LINES_PER_SECOND": "-1"},
     "KVROUTE_DECISION_LOG_REFUSAL_LINES_PER_SECOND: must be a whole number of 1 or more, "
     "got '-1'"),
    ({"KVROUTE_DECISION_LOG_REFUSAL_LINES_PER_SECOND": "0"},
     "KVROUTE_DECISION_LOG_REFUSAL_LINES_PER_SECOND: must be 1 or more, got 0"),
])
def test_bad_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(DecisionLogConfigError) as info:
        DecisionLogConfig.from_env(env)
    assert str(info.value) == message


def test_config_from_env() -> None:
    assert DecisionLogConfig.from_env({}) == DecisionLogConfig(None, 1.0)
    config = DecisionLogConfig.from_env({"KVROUTE_DECISION_LOG": " - ",
                                         "KVROUTE_DECISION_LOG_SAMPLE": "0.1"})
    assert config == DecisionLogConfig("-", 0.1)
    assert (config.refusal_rate, config.refusals_per_second) == (0.1, 10)   # the decisions'
    config = DecisionLogConfig.from_env({"KVROUTE_DECISION_LOG_REFUSAL_SAMPLE": "0.01",
                                         "KVROUTE_DECISION_LOG_REFUSALS_PER_SECOND": "50"})
    assert (config.sample_rate, config.refusal_rate, config.refusals_per_second) == (
        1.0, 0.01, 50)
    assert DecisionLogConfig.from_env({}).refusal_lines_per_second == 100
    assert DecisionLogConfig.from_env({
        "KVROUTE_DECISION_LOG_REFUSAL_LINES_PER_SECOND": " 500 "}).refusal_lines_per_second == 500


def test_a_bad_refusal_setting_stops_the_start() -> None:
    assert decision_log_problem({"KVROUTE_DECISION_LOG": "-",
                                 "KVROUTE_DECISION_LOG_REFUSAL_SAMPLE": "2"}) == (
        "KVROUTE_DECISION_LOG_REFUSAL_SAMPLE: must be between 0 and 1, got 2.0")
    assert decision_log_problem({"KVROUTE_DECISION_LOG": "-",
                                 "KVROUTE_DECISION_LOG_REFUSAL_LINES_PER_SECOND": "x"}) == (
        "KVROUTE_DECISION_LOG_REFUSAL_LINES_PER_SECOND: must be a whole number of 1 or more, "
        "got 'x'")


def test_refusals_alone_or_decisions_alone_open_the_log(tmp_path: Path) -> None:
    path = str(tmp_path / "decisions.jsonl")
    sinks, refusals, close, outcomes = open_decision_sinks(RouterMetrics(), {
        "KVROUTE_DECISION_LOG": path, "KVROUTE_DECISION_LOG_SAMPLE": "0",
        "KVROUTE_DECISION_LOG_REFUSAL_SAMPLE": "1"})
    assert [type(s) for s in sinks] == [PrefixCeiling, PrefixChoice]
    assert [type(s) for s in refusals] == [DecisionLogWriter] and not outcomes
    close()
    sinks, refusals, close, outcomes = open_decision_sinks(RouterMetrics(), {
        "KVROUTE_DECISION_LOG": path, "KVROUTE_DECISION_LOG_REFUSAL_SAMPLE": "0"})
    assert [type(s) for s in sinks] == [PrefixCeiling, PrefixChoice, DecisionLogWriter]
    assert not refusals and list(outcomes) == [sinks[2]]
    close()


def test_sinks_from_env_append_to_the_file_and_close_it(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    path.write_text('{"earlier": true}\n')
    sinks, refusals, close, _ = open_decision_sinks(RouterMetrics(),
                                                 {"KVROUTE_DECISION_LOG": str(path)})
    assert [type(s) for s in sinks] == [PrefixCeiling, PrefixChoice, DecisionLogWriter]
    assert list(refusals) == [sinks[2]]
    for sink in sinks:
        sink.on_decision(RoutingRequest(request_id="q", model="m"), _decision("q"), 0, 0.0)
    close()
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["request_id"] == "q"


def test_without_a_path_only_the_prefix_sinks_run() -> None:
    sinks, refusals, close, outcomes = open_decision_sinks(RouterMetrics(),
                                                 {"KVROUTE_DECISION_LOG_SAMPLE": "0.5"})
    assert [type(s) for s in sinks] == [PrefixCeiling, PrefixChoice]
    assert not refusals and not outcomes
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


@pytest.mark.integration
async def test_a_running_routers_storm_of_429s_is_counted_without_new_traffic(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The router's decision log writes the count of a storm's refusals held back within
    about a second of its end, with no request after it."""
    log_path = tmp_path / "decisions.jsonl"
    monkeypatch.setenv("KVROUTE_DECISION_LOG", str(log_path))
    monkeypatch.setenv("KVROUTE_DECISION_LOG_REFUSALS_PER_SECOND", "1")
    routing = ((REPO_ROOT / "config/routing.yaml").read_text()
               + "admission:\n  tenants:\n    acme: {requests_per_minute: 1}\n")
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), routing)
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 2}
    async with aiohttp.ClientSession() as session:
        statuses = []
        await asyncio.sleep(math.ceil(time.time()) + 0.02 - time.time())   # a second's start
        for i in range(6):
            async with session.post(router.url + "/v1/completions", json=body, headers={
                    "x-tenant": "acme", "x-request-id": f"storm-{i}"}) as resp:
                statuses.append(resp.status)
        last = time.time()
    assert statuses == [200] + [429] * 5
    lines: list[dict[str, Any]] = []
    while time.time() - last < 2.0:             # silence
        await asyncio.sleep(0.05)
        lines = [json.loads(line) for line in log_path.read_text().splitlines()]
        if lines and lines[-1]["kind"] == "refusals_suppressed":
            break
    assert [(line["kind"], line.get("request_id"), line.get("suppressed")) for line in lines] == [
        ("decision", "storm-0", None), ("outcome", "storm-0", None), ("refusal", "storm-1", None),
        ("refusals_suppressed", None, 4)]
    assert lines[-1]["ts"] == int(last)


@pytest.mark.integration
async def test_each_routed_request_ends_with_an_outcome_line(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The log said where each request went, never how it ended: an access log had to be
    pieced together from /debug/decisions. Each attempt that ends has its outcome line, after
    its decision's, a failing worker's 500 that the router retried elsewhere too."""
    log_path = tmp_path / "decisions.jsonl"
    monkeypatch.setenv("KVROUTE_DECISION_LOG", str(log_path))
    router = await make_router(subset(emulated_fleet, ["failing", "h100-fast"]),
                               ROUTING_ROUND_ROBIN)
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 2}
    async with aiohttp.ClientSession() as session:
        for i in range(4):
            async with session.post(router.url + "/v1/completions", json=body, headers={
                    "x-tenant": "acme", "x-request-id": f"r-{i}"}) as resp:
                assert resp.status == 200
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    for i in range(4):
        mine = [(line["kind"], line["attempt"], line["worker"], line.get("status"))
                for line in lines if line["request_id"] == f"r-{i}"]
        assert mine in ([("decision", 0, "h100-fast", None), ("outcome", 0, "h100-fast", 200)],
                        [("decision", 0, "failing", None), ("outcome", 0, "failing", 500),
                         ("decision", 1, "h100-fast", None),
                         ("outcome", 1, "h100-fast", 200)]), mine
    served = [line for line in lines if line["kind"] == "outcome" and line["status"] == 200]
    assert len(served) == 4 and any(line["attempt"] == 1 for line in served)
    for line in served:
        assert (line["tenant"], line["model"]) == ("acme", MODEL)
        assert line["completion_tokens"] == 2 and line["prompt_tokens"] > 0
        assert 0 < line["e2e_s"] <= line["client_s"]


@pytest.mark.integration
async def test_an_attempt_the_router_refused_itself_has_its_outcome_line(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An attempt refused by the router's own open-file limit (no connection to the worker)
    had a decision line and no outcome line, and /debug/decisions no outcome: now both say
    the router answered it, with its 503."""
    from router.keys import DIRECTOR
    from workers.upstream import UpstreamLocalError

    log_path = tmp_path / "decisions.jsonl"
    monkeypatch.setenv("KVROUTE_DECISION_LOG", str(log_path))
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), ROUTING_ROUND_ROBIN)
    client = router.app[DIRECTOR]._proxy._client

    async def no_descriptors(*args: object, **kwargs: object) -> None:
        raise UpstreamLocalError("cannot connect to 127.0.0.1:1: Too many open files")

    monkeypatch.setattr(client, "_pooled", lambda *args: None)
    monkeypatch.setattr(client, "_connect", no_descriptors)
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 2}
    async with aiohttp.ClientSession() as session:
        async with session.post(router.url + "/v1/completions", json=body,
                                headers={"x-request-id": "no-fd"}) as resp:
            assert resp.status == 503
        async with session.get(router.url + "/debug/decisions") as resp:
            shown = (await resp.json())["data"]
    assert [(d["request_id"], (d["outcome"] or {}).get("status"),
             (d["outcome"] or {}).get("answered_by")) for d in shown] == [
        ("no-fd", 503, "router")]
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [(line["kind"], line["worker"], line.get("status"), line.get("answered_by"))
            for line in lines] == [("decision", "h100-fast", None, None),
                                   ("outcome", "h100-fast", 503, "router")]
