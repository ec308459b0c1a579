"""The live router's decision log (``KVROUTE_DECISION_LOG``, sample 1) and its demand gauges."""

from __future__ import annotations

import json

import pytest

from tests.observability.obs_stack import MODEL, TINY_MODEL, Stack

pytestmark = [pytest.mark.observability, pytest.mark.integration]


def test_one_line_per_decision_with_the_candidates_scores(live_stack: Stack) -> None:
    logged = [json.loads(line) for line in live_stack.decision_log.read_text().splitlines()]
    assert {r["kind"] for r in logged} == {"decision", "refusal", "outcome"}
    lines = [r for r in logged if r["kind"] == "decision"]
    # each attempt sent to a worker ends in an outcome line, after its decision's (requests
    # run side by side: they end in any order)
    decided_at = {(r["request_id"], r["attempt"]): (i, r["worker"]) for i, r in enumerate(logged)
                  if r["kind"] == "decision"}
    ended = [(i, r) for i, r in enumerate(logged) if r["kind"] == "outcome"]
    for i, r in ended:
        at, worker = decided_at[(r["request_id"], r["attempt"])]
        assert at < i and worker == r["worker"] is not None
    assert len({(r["request_id"], r["attempt"]) for _, r in ended}) == len(ended)
    assert len(ended) >= len(live_stack.statuses) - live_stack.statuses.count(429) - len(
        [r for r in lines if r["worker"] is None])
    # the batch tenant's requests over its budget: a line each, with no worker and why
    refusals = [r for r in logged if r["kind"] == "refusal"]
    assert len(refusals) == live_stack.statuses.count(429) >= 1
    assert {(r["tenant"], r["reason_code"], r["status"], r["worker"]) for r in refusals} == {
        ("batch", "requests_per_minute", 429, None)}
    assert not {r["request_id"] for r in refusals} & {r["request_id"] for r in lines}
    # every decision and refusal names the routing file in force (the stack never reloads it)
    assert len({r["routing_sha256"] for r in logged if r["kind"] != "outcome"}) == 1
    assert logged[0]["routing_sha256"]
    decided = [r for r in lines if r["worker"] is not None]
    # one line per decision: each request's attempts are 0, 1, ... once each
    attempts: dict[str, list[int]] = {}
    for r in lines:
        attempts.setdefault(r["request_id"], []).append(r["attempt"])
    assert all(a == list(range(len(a))) for a in attempts.values())
    # every failed attempt counts a retry; it leads to another decision unless it was the
    # last allowed one, and then the client got a 502
    retries = sum(float(r["value"][1]) for r in live_stack.prometheus.query(
        "kvroute_retries_total"))
    first = [r for r in lines if r["attempt"] == 0]
    assert retries >= 1
    assert len(lines) - len(first) + live_stack.statuses.count(502) == retries
    assert {r["request_id"] for r in first} >= set(live_stack.request_ids) - {""}
    main = [r for r in decided if r["model"] == MODEL]
    assert {r["profile"] for r in main} == {"default", "economy"}
    assert {r["tenant"] for r in main} == {"tenant-a", "tenant-b", "batch"}
    for record in main:
        totals = {c["worker"]: c["total"] for c in record["candidates"]}
        assert totals[record["worker"]] == max(totals.values())     # max-score picker
        scorers = {"prefix", "inflight", "cost"} if record["profile"] == "default" else {
            "cost", "queue-depth"}
        assert all(set(c["scores"]) == scorers for c in record["candidates"])
    unknown = [r for r in lines if r["model"] == "no-such-model"]
    assert [r["reason_code"] for r in unknown] == ["no-candidate"]


def test_pool_demand_gauges_per_pool(live_stack: Stack) -> None:
    healthy = {(r["metric"]["pool"], r["metric"]["model"]): float(r["value"][1]) for r in
               live_stack.prometheus.query("kvroute_pool_demand_healthy_workers")}
    assert healthy == {("premium", MODEL): 1.0, ("standard", MODEL): 1.0,
                       ("economy", MODEL): 1.0, ("overload", TINY_MODEL): 0.0}
    queued = live_stack.prometheus.query_range(
        'kvroute_pool_demand_queued_tokens{pool="overload"}', live_stack.started_at,
        live_stack.traffic_done_at, 1.0)
    assert max(v for s in queued for _, v in s.points) > 0
