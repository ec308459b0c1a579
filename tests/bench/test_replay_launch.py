"""``--launch up``: the kvroute serve command becomes kvroute up; other targets are skipped."""

from __future__ import annotations

import json
from pathlib import Path

from bench.launch import python_module
from bench.replay import ReplayConfig, run_replay, up_argv

REPO = Path(__file__).resolve().parents[2]


def test_up_argv_keeps_the_serve_arguments_and_adds_the_time_scale() -> None:
    python = tuple(python_module("router.cli"))       # (the interpreter, -P, -m, ...)
    serve = (*python, "serve", "--fleet", "f.yaml", "--routing", "r.yaml", "--port", "9000")
    assert up_argv(serve, 0.5) == (*python, "up", "--fleet", "f.yaml", "--routing", "r.yaml",
                                   "--port", "9000", "--time-scale", "0.5",
                                   "--emulator-processes", "one")
    each = up_argv(serve, 1.0, "each")
    assert each is not None and each[-2:] == ("--emulator-processes", "each")
    assert up_argv(("/usr/sbin/nginx", "-p", "x"), 1.0) is None
    assert up_argv((), 1.0) is None


def test_direct_is_skipped_under_launch_up_without_starting_anything(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 2,
                                 "hash_ids": [1, 2]}) + "\n")
    config = ReplayConfig(trace=trace, targets=("direct",), fleet=REPO / "config" / "fleet.yaml",
                          limit=1, launch="up")
    messages: list[str] = []
    [result] = run_replay(config, messages.append)
    assert result.skipped == "--launch up runs kvroute targets only"
    assert result.requests == 0
    assert "direct: skipped (--launch up runs kvroute targets only)" in messages
