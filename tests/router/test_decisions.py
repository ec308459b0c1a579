"""The decision ring buffer and the short reason label."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from policies.base import CandidateScore, Decision
from router.decisions import DecisionLog, DecisionRecord, reason_code


def _decision(i: int, decided_by: str | None = "queue-depth") -> Decision:
    attributes = {"decided_by": decided_by} if decided_by else {}
    return Decision(
        request_id=f"r{i}", worker_id="w1", model="m", profile="default", rule="long",
        reason=f"reason {i}",
        candidates=(CandidateScore("w1", 1.5, MappingProxyType({"queue-depth": 0.75})),
                    CandidateScore("w2", 0.5, MappingProxyType({"queue-depth": 0.25}))),
        filtered_out=MappingProxyType({"w3": "healthy"}),
        attributes=MappingProxyType({**attributes, "estimated_ttft_s": float("inf")}))


def _record(i: int) -> DecisionRecord:
    return DecisionRecord(at=1_700_000_000.25, decision=_decision(i), requested_model="m",
                          path="/v1/chat/completions", attempt=0, duration_s=42e-6,
                          num_prompt_tokens=12, semantic_class=None)


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
    log.record(dataclasses.replace(_record(1), decision=decision))
    attributes = json.loads(json.dumps(log.render()[0]))["attributes"]
    assert attributes == {"skipped_plugins": ["failing-producer", "bad-picker"],
                          "odd": [1.5, None]}
