from __future__ import annotations

from pathlib import Path

from bench.metrics_scrape import GcPauseTotals, RouterPrefixCounters
from bench.replay import COUNTERS, ReplayConfig, ReplayRequest, summarize
from bench.replay_report import markdown_table, write_replay


def _counters(hits: float, queries: float, prompt: float,
              generated: float = 0.0) -> dict[str, float]:
    return dict(zip(COUNTERS, (hits, queries, prompt, generated), strict=True))


def test_summary_in_emulated_seconds_with_slo_and_worker_hits() -> None:
    requests = [ReplayRequest(0.0, "a", 100, 11, ttft_target_s=0.5),
                ReplayRequest(0.1, "b", 100, 11, ttft_target_s=0.5),
                ReplayRequest(0.2, "c", 100, 1, ttft_target_s=0.5),
                ReplayRequest(0.3, "d", 100, 11, ttft_target_s=0.5)]
    # wall seconds at time scale 0.5: emulated = wall / 0.5
    outcomes = [(0.1, 0.3, None),        # ttft 0.2, tpot (0.6-0.2)/10 = 0.04 → meets SLO
                (0.3, 0.35, None),       # ttft 0.6 > 0.5 → misses
                (0.05, 0.05, None),      # one output token: TTFT only → meets
                (None, 1.0, "HTTP 500")]
    before = {"w0": _counters(0, 0, 0), "w1": _counters(10, 100, 100, 5)}
    after = {"w0": _counters(30, 100, 300, 12), "w1": _counters(40, 200, 200, 27)}
    result = summarize("kvroute", requests, outcomes, 0.5, before, after, wall_s=2.04)
    assert (result.requests, result.completed, result.errors) == (4, 3, 1)
    assert result.first_error == "HTTP 500"
    assert result.ttft_p50_s == 0.2 and result.ttft_p99_s == 0.6
    assert (result.tpot_p50_s, result.tpot_p99_s) == (0.01, 0.04)   # b: (0.7 - 0.6) / 10
    assert result.slo_attainment == 0.5                      # 2 of 4 sent
    assert result.prefix_hit_rate == 0.3                     # (30 + 30) / (100 + 100)
    assert result.prompt_token_share == {"w0": 0.75, "w1": 0.25}
    assert result.generated_tokens == 12 + 22
    assert result.wall_s == 2.0
    assert (result.router_known_chosen_share, result.router_known_best_share) == (None, None)


def test_no_slo_attainment_when_the_emulators_answer_at_once() -> None:
    requests = [ReplayRequest(0.0, "a", 100, 11, ttft_target_s=0.5)]
    counters = {"w0": _counters(0, 0, 0)}
    result = summarize("kvroute", requests, [(0.1, 0.3, None)], 0.0, counters, counters,
                       wall_s=1.0)
    assert result.slo_attainment is None        # wall-clock times, not emulated seconds
    assert result.ttft_p50_s == 0.1 and result.completed == 1


def test_replay_files(tmp_path: Path) -> None:
    requests = [ReplayRequest(0.0, "a", 10, 2, 0.5)]
    counters = {"w0": _counters(0, 10, 10)}
    result = summarize("vllm-router", requests, [(0.1, 0.2, None)], 1.0,
                       {"w0": _counters(0, 0, 0)}, counters, 1.0)
    table = markdown_table([result])
    assert "| vllm-router | 1 / 1 | 0.100 / 0.100 / 0.100 | 100.0 / 100.0 |" in table
    assert "| 0.000 | – / – | 1.000 |" in table           # hit rate, no router counters, share
    router = summarize("kvroute", requests, [(0.1, 0.2, None)], 1.0,
                       {"w0": _counters(0, 0, 0)}, counters, 1.0,
                       RouterPrefixCounters({}, {}, 0.0),
                       RouterPrefixCounters({"load": 0.0, "prefix": 2.0},
                                            {"load": 3.0, "prefix": 2.0}, 10.0))
    assert router.router_passed_over_by_term == {"load": 0.3}
    table = markdown_table([router])
    assert "| 0.200 / 0.500 |" in table
    assert "- kvroute: load 0.300" in table
    assert "passed over" not in markdown_table([result])
    assert "garbage collections" not in markdown_table([result])     # no router's pauses
    collected = summarize("kvroute", requests, [(0.1, 0.2, None)], 1.0,
                          {"w0": _counters(0, 0, 0)}, counters, 1.0,
                          gc_pauses={"0": GcPauseTotals(40, 0.012, 0),
                                     "2": GcPauseTotals(3, 0.045, 1)})
    assert collected.router_gc["2"] == {"collections": 3, "seconds": 0.045, "over_10ms": 1}
    assert ("- kvroute: generation 0: 40 taking 12 ms (0 over 10 ms), generation 2: 3 taking "
            "45 ms (1 over 10 ms)") in markdown_table([collected])
    config = ReplayConfig(trace=Path("t"), targets=("vllm-router",), fleet=Path("f"))
    paths = write_replay(tmp_path, config, [result], "kvroute bench replay ...")
    assert [p.name for p in paths] == ["replay.json", "replay.md", "replay.png"]
