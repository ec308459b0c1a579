"""Admission refusals: the decision log's line of one, and the recorder that keeps each in
the ring and hands it to the sinks."""

from __future__ import annotations

import json

import pytest

from router.decisions import DecisionLog
from router.refusals import RefusalRecord, RefusalRecorder, refusal_line

RECORD = RefusalRecord(at=1_700_000_000.25, request_id="req-9", trace_id=None, tenant="acme",
                       model="m", path="/v1/completions", reason="queue_full", status=503,
                       message="The router is serving as many requests as it may (1) and 1 "
                               "more are waiting: try again later.",
                       routing_sha256="0123456789ab")


def test_a_refusals_line_names_the_request_its_reason_and_status_and_no_worker() -> None:
    line = refusal_line(RECORD)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {
        "kind": "refusal", "ts": 1700000000.25, "request_id": "req-9", "trace_id": None,
        "model": "m", "path": "/v1/completions", "tenant": "acme", "worker": None,
        "routing_sha256": "0123456789ab", "reason_code": "queue_full",
        "reason": RECORD.message, "status": 503}


class _Failing:
    def on_refusal(self, record: RefusalRecord) -> None:
        raise OSError(28, "No space left on device")


class _Kept:
    def __init__(self) -> None:
        self.records: list[RefusalRecord] = []

    def on_refusal(self, record: RefusalRecord) -> None:
        self.records.append(record)


def test_the_recorder_keeps_the_refusal_whatever_a_sink_does(
        caplog: pytest.LogCaptureFixture) -> None:
    ring, kept = DecisionLog(8), _Kept()
    recorder = RefusalRecorder(ring, [_Failing(), kept])
    for _ in range(3):
        recorder.refused(RECORD)
    assert len(ring) == 3 and kept.records == [RECORD] * 3
    failures = [r for r in caplog.records if "refusal sink _Failing failed" in r.getMessage()]
    assert len(failures) == 1                      # the first, then one in every 1,000
