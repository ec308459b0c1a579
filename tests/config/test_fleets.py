"""The shipped fleet files: valid, and the KV-event variant of the reference fleet is that
fleet with a distinct event stream (and replay socket) per emulated worker."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from workers.fleet import load_fleet
from workers.kv_events.wiring import sources_for

FLEETS = Path(__file__).resolve().parents[2] / "config" / "fleets"


@pytest.mark.parametrize("path", sorted(FLEETS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_fleet_file_loads(path: Path) -> None:
    fleet = load_fleet(path)
    assert fleet.workers
    assert len({spec.info.id for spec in fleet.workers}) == len(fleet.workers)


def test_the_kv_event_fleet_is_the_reference_fleet_publishing_events() -> None:
    plain = load_fleet(FLEETS / "reference-h100.yaml")
    events = load_fleet(FLEETS / "reference-h100-kv-events.yaml")
    sources = sources_for(spec.info for spec in events.workers)
    assert [s.worker_id for s in sources] == [spec.info.id for spec in plain.workers]
    endpoints = [s.endpoint for s in sources] + [s.replay_endpoint for s in sources]
    assert all(e is not None and e.startswith("tcp://127.0.0.1:") for e in endpoints)
    assert len(set(endpoints)) == 2 * len(sources)
    for a, b in zip(plain.workers, events.workers, strict=True):
        labels = {k: v for k, v in b.info.labels.items() if k != "kv_events_replay"}
        assert replace(b.info, kv_events_endpoint=None, labels=labels) == replace(
            a.info, labels=dict(a.info.labels))
        assert b.emulate is not None and a.emulate is not None
        assert b.emulate["port"] == a.emulate["port"]
