"""The router's own accounting of requests it has sent to each worker and not seen finish.

Scrapes lag (one poll interval, plus the worker's own step lag); between polls a burst would
all land on the worker that looked idle. The tracker closes that gap: every dispatch is
counted at once, and ``build_view`` adds what the last snapshot cannot have seen yet.
Used identically by the live router and by the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class WorkerInflight:
    requests: int = 0            # dispatched, not finished
    prefill_tokens: int = 0      # uncached prompt tokens of dispatched requests not yet started
    decode_tokens: int = 0       # tokens still to generate (estimated from max_tokens)
    dispatched_since_scrape: int = 0   # dispatches after the worker's last snapshot


class InflightTracker:
    """Per-worker in-flight counters. Not thread-safe: owned by one event loop."""

    __slots__ = ("_by_worker",)

    def __init__(self) -> None:
        self._by_worker: dict[str, WorkerInflight] = {}

    def get(self, worker_id: str) -> WorkerInflight:
        entry = self._by_worker.get(worker_id)
        if entry is None:
            entry = self._by_worker[worker_id] = WorkerInflight()
        return entry

    def on_dispatch(self, worker_id: str, prefill_tokens: int, decode_tokens: int) -> None:
        entry = self.get(worker_id)
        entry.requests += 1
        entry.prefill_tokens += prefill_tokens
        entry.decode_tokens += decode_tokens
        entry.dispatched_since_scrape += 1

    def on_first_token(self, worker_id: str, prefill_tokens: int) -> None:
        entry = self.get(worker_id)
        entry.prefill_tokens = max(0, entry.prefill_tokens - prefill_tokens)

    def on_complete(self, worker_id: str, prefill_tokens_left: int, decode_tokens: int) -> None:
        """A request finished (or failed); remove what it still held."""
        entry = self.get(worker_id)
        entry.requests = max(0, entry.requests - 1)
        entry.prefill_tokens = max(0, entry.prefill_tokens - prefill_tokens_left)
        entry.decode_tokens = max(0, entry.decode_tokens - decode_tokens)

    def forget(self, worker_id: str) -> None:
        """Drop a worker's entry once it holds no request (a worker that left the fleet;
        one still serving some keeps counting them down)."""
        entry = self._by_worker.get(worker_id)
        if entry is not None and entry.requests == 0:
            del self._by_worker[worker_id]

    def on_scrape(self, worker_id: str) -> None:
        """A fresh snapshot arrived: it now reflects everything dispatched before it."""
        self.get(worker_id).dispatched_since_scrape = 0
