"""Replays whose clients do not send the answer's length: what each request says, the fleet
whose own answers end at once, and a live replay in which the answers keep the trace's
lengths while the router is told no ``max_tokens``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bench.replay import (
    ReplayConfig,
    ReplayRequest,
    answers_end_at_once,
    build_requests,
    request_body,
    request_path,
    run_replay,
)
from sim.client_max_tokens import ClientMaxTokens
from workers.fleet import load_fleet

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO.parent / "shared" / "traces" / "azure_llm_2023_code.csv.gz"
REQUEST = ReplayRequest(at_s=0.0, prompt="def f():", prompt_tokens=3, output_tokens=40,
                        ttft_target_s=0.5)


def test_each_mode_tells_the_router_what_such_clients_do() -> None:
    exact = ClientMaxTokens.parse("exact")
    assert request_body("m", REQUEST, exact) == {
        "model": "m", "prompt": "def f():", "stream": True, "max_tokens": 40,
        "ignore_eos": True}
    assert request_path(exact) == "/v1/completions"
    # the others are chat: a completion without max_tokens would get 16 tokens
    assert {request_path(ClientMaxTokens.parse(m)) for m in ("none", "64")} == {
        "/v1/chat/completions"}
    base = {"model": "m", "stream": True,
            "messages": [{"role": "user", "content": "def f():"}]}
    assert request_body("m", REQUEST, ClientMaxTokens.parse("none")) == {
        **base, "min_tokens": 39}
    assert request_body("m", REQUEST, ClientMaxTokens.parse("4096")) == {
        **base, "max_tokens": 4096, "min_tokens": 39}
    assert request_body("m", REQUEST, ClientMaxTokens.parse("16")) == {      # raised to 40
        **base, "max_tokens": 40, "min_tokens": 39}


def test_the_emulated_answers_end_at_once() -> None:
    text = answers_end_at_once((REPO / "config" / "fleet.yaml").read_text())
    original = yaml.safe_load((REPO / "config" / "fleet.yaml").read_text())
    rewritten = yaml.safe_load(text)
    for before, after in zip(original["workers"], rewritten["workers"], strict=True):
        assert after["emulate"] == {**before["emulate"],
                                    "output_len": {"dist": "fixed", "value": 1}}
        assert {k: v for k, v in after.items() if k != "emulate"} == {
            k: v for k, v in before.items() if k != "emulate"}


@pytest.mark.integration
@pytest.mark.skipif(not TRACE.exists(), reason="shared traces not present")
@pytest.mark.parametrize("mode", ["none", "64"])
def test_a_live_replay_keeps_the_traces_lengths_without_telling_the_router(mode: str) -> None:
    config = ReplayConfig(trace=TRACE, targets=("kvroute",), fleet=REPO / "config" / "fleet.yaml",
                          limit=12, rate_scale=1000.0, time_scale=0.0, max_output_tokens=24,
                          client_max_tokens=ClientMaxTokens.parse(mode))
    expected = sum(r.output_tokens for r in
                   build_requests(config, load_fleet(config.fleet)))
    messages: list[str] = []
    [result] = run_replay(config, messages.append)
    assert (result.skipped, result.requests, result.completed, result.errors) == (
        None, 12, 12, 0)
    # the workers generated every answer's trace length, no more (the emulator's own
    # lognormal lengths would not add up to it)
    assert result.generated_tokens == expected
    assert any(f"clients send max_tokens {mode} and min_tokens" in m for m in messages)
