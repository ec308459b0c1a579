"""The decision ring buffer (and the admission refusals kept beside it) and the short reason
label."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from policies.base import CandidateScore, Decision
from router.decisions import DecisionLog, DecisionRecord, reason_code
from router.refusals import RefusalRecord


def _decision(i: int, decided_by: str | None = "queue-depth") -> Decision:
    attributes = {"decided_by": decided_by} if decided_by else {}
    return Decision(
        request_id=f"r{i}", worker_id="w1", model="m", profile="default", rule="long",
        reason=f"reason {i}",
        candidates=(CandidateScore("w1", 1.5, MappingProxyType({"queue-depth": 0.75})),
                    CandidateScore("w2", 0.5, MappingProxyType({"queue-depth": 0.25}))),
        filtered_out=MappingProxyType({"w3": "healthy"}),
        attributes=MappingProxyType({**attributes, "estimated_ttft_s": float("inf")}))


def _record(i: int, at: float = 1_700_000_000.25) -> DecisionRecord:
    return DecisionRecord(at=at, decision=_decision(i), requested_model="m",
                          path="/v1/chat/completions", attempt=0, duration_s=42e-6,
                          num_prompt_tokens=12, semantic_class=None,
                          routing_sha256="abc123def456")


def _refusal(i: int, at: float) -> RefusalRecord:
    return RefusalRecord(at=at, request_id=f"x{i}", trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
                         tenant="acme", model="m", path="/v1/chat/completions",
                         reason="requests_per_minute", status=429,
                         message="Rate limit reached", routing_sha256="abc123def456")


def test_ring_keeps_the_newest_and_renders_newest_first() -> None:
    log = DecisionLog(size=3)
    for i in range(5):
        log.record(_record(i))
    assert len(log) == 3
    rendered = log.render()
    assert [d["request_id"] for d in rendered] == ["r4", "r3", "r2"]
    assert [d["request_id"] for d in log.render(limit=1)] == ["r4"]
    first = rendered[0]
    assert first["time"] == "2023-11-14T22:13:20.250Z"
    assert first["candidates"] == [
        {"worker": "w1", "total": 1.5, "scores": {"queue-depth": 0.75}},
        {"worker": "w2", "total": 0.5, "scores": {"queue-depth": 0.25}}]
    assert first["filtered_out"] == {"w3": "healthy"}
    assert first["attributes"] == {"decided_by": "queue-depth", "estimated_ttft_s": None}
    assert (first["rule"], first["reason_code"], first["decision_us"]) == (
        "long", "queue-depth", 42.0)
    assert (first["kind"], first["routing_sha256"]) == ("decision", "abc123def456")


def test_refusals_are_read_with_the_decisions_newest_first() -> None:
    log = DecisionLog(size=4)
    log.record(_record(0, at=10.0))
    log.refused(_refusal(1, at=11.0))
    log.record(_record(2, at=12.0))
    rendered = log.render()
    assert [d["request_id"] for d in rendered] == ["r2", "x1", "r0"]
    # the limit counts each kind apart
    assert [d["request_id"] for d in log.render(limit=1)] == ["r2", "x1"]
    assert [d["request_id"] for d in log.render(limit=2)] == ["r2", "x1", "r0"]
    assert rendered[1] == {
        "time": "1970-01-01T00:00:11.000Z", "kind": "refusal", "request_id": "x1",
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "path": "/v1/chat/completions",
        "requested_model": "m", "tenant": "acme", "worker": None,
        "routing_sha256": "abc123def456", "reason_code": "requests_per_minute",
        "reason": "Rate limit reached", "status": 429}
    assert log.render()[1] is rendered[1]          # rendered once, as a decision is


def test_a_storm_of_refusals_keeps_its_own_bound_and_the_decisions() -> None:
    """Refusals come far faster than decisions (a refusal costs the router next to
    nothing): in one ring, 256 of them pushed every decision out."""
    log = DecisionLog(size=3)
    log.record(_record(0, at=1.0))
    for i in range(1000):
        log.refused(_refusal(i, at=2.0 + i))
    assert len(log) == 4                           # 3 refusals and the decision
    assert [d["request_id"] for d in log.render()] == ["x999", "x998", "x997", "r0"]


def test_a_storm_of_refusals_does_not_hide_the_decisions_from_a_limit() -> None:
    """The limit was counted across both kinds: 50 decisions then 300 refusals, and
    ``limit=20`` answered 20 refusals and no decision."""
    log = DecisionLog(size=256)
    for i in range(50):
        log.record(_record(i, at=1.0 + i))
    for i in range(300):
        log.refused(_refusal(i, at=100.0 + i))
    newest = log.render(limit=20)
    assert [d["request_id"] for d in newest] == (
        [f"x{i}" for i in range(299, 279, -1)] + [f"r{i}" for i in range(49, 29, -1)])
    assert [d["request_id"] for d in log.render(limit=3, kind="decision")] == [
        "r49", "r48", "r47"]
    assert [d["request_id"] for d in log.render(limit=2, kind="refusal")] == ["x299", "x298"]
    assert len(log.render(kind="decision")) == 50 and len(log.render(kind="refusal")) == 256
    assert log.render(limit=0) == []
    with pytest.raises(ValueError, match="kind"):
        log.render(kind="decisions")


def test_a_filter_is_applied_before_the_limit_of_each_kind() -> None:
    log = DecisionLog(size=16)
    for i in range(6):
        log.record(_record(i, at=float(2 * i)))
        log.refused(_refusal(i, at=float(2 * i + 1)))
    even = log.render(limit=2, where=lambda d: d["request_id"][1] in "024")
    assert [d["request_id"] for d in even] == ["x4", "r4", "x2", "r2"]
    assert [d["request_id"] for d in log.render(
        limit=1, kind="refusal", where=lambda d: d["request_id"] == "x0")] == ["x0"]


def test_a_decision_is_rendered_once_however_often_it_is_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At 40 workers the whole ring took 50 ms to render, at every read, on the event loop."""
    from router import decisions

    calls: list[str] = []
    real = decisions._render

    def counting(record: DecisionRecord, outcome: decisions.Outcome | None
                 ) -> dict[str, object]:
        calls.append(record.decision.request_id)
        return real(record, outcome)

    monkeypatch.setattr(decisions, "_render", counting)
    log = DecisionLog(size=3)
    for i in range(3):
        log.record(_record(i))
    first = log.render(limit=2)
    assert calls == ["r2", "r1"]
    again = log.render()
    assert calls == ["r2", "r1", "r0"]               # only the one not read before
    assert all(a is b for a, b in zip(again[:2], first, strict=True))
    entry = log.record(_record(3))                   # r0 leaves the ring
    assert [d["request_id"] for d in log.render()] == ["r3", "r2", "r1"]
    assert calls == ["r2", "r1", "r0", "r3"]
    assert log.render()[0]["outcome"] is None        # its attempt runs
    DecisionLog.ended(entry, {"status": 200})        # it ended: rendered anew, once
    assert log.render()[0]["outcome"] == {"status": 200}
    assert log.render(limit=1)[0]["outcome"] == {"status": 200}
    assert calls == ["r2", "r1", "r0", "r3", "r3"]


def test_reason_code() -> None:
    assert reason_code(_decision(0, "Max Score!")) == "max-score-"
    assert reason_code(_decision(0, None)) == "unknown"
    none = Decision(request_id="r", worker_id=None, model="m", profile="p", rule=None,
                    reason="no candidate")
    assert reason_code(none) == "no-candidate"


def test_the_plugins_skipped_are_a_json_list() -> None:
    """They were rendered as Python's text of a tuple, ``"('bad-picker',)"``."""
    import dataclasses
    import json

    decision = dataclasses.replace(_decision(1), attributes=MappingProxyType({
        "skipped_plugins": ("failing-producer", "bad-picker"), "odd": (1.5, float("nan"))}))
    log = DecisionLog(size=1)
    log.record(_record(1)._replace(decision=decision))
    attributes = json.loads(json.dumps(log.render()[0]))["attributes"]
    assert attributes == {"skipped_plugins": ["failing-producer", "bad-picker"],
                          "odd": [1.5, None]}
