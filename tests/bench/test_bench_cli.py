from __future__ import annotations

import pytest

from bench.cli import _targets
from router.cli import build_parser


def test_bench_commands_parse() -> None:
    parser = build_parser()
    args = parser.parse_args(["bench", "overhead", "--out", "x", "--targets", "direct,nginx",
                              "--duration", "2"])
    assert (args.bench_command, args.targets, args.duration) == ("overhead", "direct,nginx", 2.0)
    args = parser.parse_args(["bench", "replay", "--trace", "t.jsonl", "--out", "y",
                              "--limit", "5"])
    assert (args.bench_command, args.limit, args.targets) == (
        "replay", 5, "kvroute,sglang-router,vllm-router")


def test_unknown_targets_are_refused_with_the_known_ones() -> None:
    assert _targets(" direct , kvroute-rr ") == ("direct", "kvroute-rr")
    with pytest.raises(SystemExit, match=r"unknown target.*envoy.*known: direct"):
        _targets("direct,envoy")


def test_bad_numbers_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["bench", "overhead", "--out", "x", "--duration", "0"])
    assert args.func(args) == 2
    assert "--duration, --concurrency and --backends must be > 0" in capsys.readouterr().err
    args = parser.parse_args(["bench", "replay", "--trace", "t.jsonl", "--out", "y",
                              "--repeat", "0"])
    assert args.func(args) == 2
    assert "--repeat >= 1" in capsys.readouterr().err


def test_cpu_lists() -> None:
    from bench.overhead import OverheadConfig

    assert OverheadConfig.cpu_set("0,2-4") == (0, 2, 3, 4)
    assert OverheadConfig.cpu_set("7") == (7,)
