"""``workers.inflight``: the router's own in-flight counts, and forgetting a worker that left
the fleet without losing the requests it still serves."""

from __future__ import annotations

from workers.inflight import InflightTracker


def test_counts_follow_dispatch_first_token_and_completion() -> None:
    tracker = InflightTracker()
    tracker.on_dispatch("w", prefill_tokens=100, decode_tokens=20)
    tracker.on_dispatch("w", prefill_tokens=50, decode_tokens=10)
    entry = tracker.get("w")
    assert (entry.requests, entry.prefill_tokens, entry.decode_tokens) == (2, 150, 30)
    assert entry.dispatched_since_scrape == 2
    tracker.on_first_token("w", 100)
    tracker.on_scrape("w")
    tracker.on_complete("w", 0, 20)
    assert (entry.requests, entry.prefill_tokens, entry.decode_tokens) == (1, 50, 10)
    assert entry.dispatched_since_scrape == 0


def test_a_forgotten_worker_goes_once_it_serves_nothing() -> None:
    """Workers that left the fleet kept an entry each for the life of the process."""
    tracker = InflightTracker()
    tracker.on_dispatch("gone", 10, 10)
    tracker.forget("gone")                 # a request still in flight: still counted
    assert tracker.get("gone").requests == 1
    tracker.on_complete("gone", 10, 10)
    tracker.forget("gone")
    assert "gone" not in tracker._by_worker
