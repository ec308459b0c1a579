"""A tiny replay through two targets against a real emulated fleet (time scale 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.replay import ReplayConfig, run_replay

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO.parent / "shared" / "traces" / "azure_llm_2023_code.csv.gz"


@pytest.mark.skipif(not TRACE.exists(), reason="shared traces not present")
def test_replay_through_direct_and_kvroute() -> None:
    config = ReplayConfig(trace=TRACE, targets=("direct", "kvroute-rr"),
                          fleet=REPO / "config" / "fleet.yaml", limit=4, rate_scale=1000.0,
                          time_scale=0.0, max_output_tokens=4)
    messages: list[str] = []
    results = run_replay(config, messages.append)
    assert [r.name for r in results] == ["direct", "kvroute-rr"]
    for result in results:
        assert (result.skipped, result.requests, result.completed, result.errors) == (
            None, 4, 4, 0)
        assert result.prefix_hit_rate is not None
        assert abs(sum(result.prompt_token_share.values()) - 1.0) < 0.01
    # direct sends everything to the first worker; round-robin spreads over three
    assert results[0].prompt_token_share["h100-0"] == 1.0
    assert sum(1 for v in results[1].prompt_token_share.values() if v > 0) == 3
    assert any("replaying 4 requests" in m for m in messages)
