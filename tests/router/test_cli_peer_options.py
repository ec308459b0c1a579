"""``kvroute serve`` / ``up`` given another router's options: argparse's error, and where
kvroute's counterparts are described."""

from __future__ import annotations

import pytest

from router.cli import main, peer_option_hint

HINT = "docs/migrating.md maps the options of sglang-router, vllm-router and production-stack"


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("usage: kvroute")
    return lines[-1]


@pytest.mark.parametrize("command", ["serve", "up"])
def test_a_peer_option_is_refused_with_the_migration_guide_named(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = _error([command, "--policy", "cache_aware", "--worker-urls", "http://10.0.0.7:8000",
                   "--port", "25020"], capsys)
    assert line == (
        "kvroute: error: unrecognized arguments: --policy cache_aware --worker-urls "
        f"http://10.0.0.7:8000 (kvroute {command} takes its workers from a fleet file, --fleet, "
        f"and its policy from a routing file, --routing: {HINT})")


@pytest.mark.parametrize("argv", [["serve", "--routing-logic=session"],
                                  ["up", "--service-discovery", "--selector", "app=vllm"]])
def test_each_peer_option_is_recognised_written_either_way(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _error(argv, capsys).endswith(f"{HINT})")


def test_other_unknown_options_and_commands_keep_argparses_words(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _error(["serve", "--bogus", "1"], capsys) == \
        "kvroute: error: unrecognized arguments: --bogus 1"
    assert peer_option_hint("validate", ["--policy", "x"]) == ""
    assert peer_option_hint("serve", ["--policies", "x"]) == ""
    assert peer_option_hint("serve", ["--worker-urls=http://a"]).endswith(f"{HINT})")
