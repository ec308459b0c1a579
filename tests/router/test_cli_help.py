"""``kvroute --help`` at every level: each option and each sub-command says what it is for."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from router.cli import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"

# always built in (the optional parts of kvroute are skipped when not installed)
CORE_COMMANDS = {"up", "serve", "validate", "emulate", "sim", "scorecard", "bench", "dashboard"}


def _parsers(parser: argparse.ArgumentParser, path: str = "kvroute"
             ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``(command line, parser)`` of ``parser`` and of every sub-command below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def _subcommand_help(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str | None]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield choice.dest, choice.help


def test_every_option_and_subcommand_has_a_help_string() -> None:
    parsers = dict(_parsers(build_parser()))
    top = {path.split()[1] for path in parsers if path.count(" ") == 1}
    assert not CORE_COMMANDS - top, f"missing sub-commands: {sorted(CORE_COMMANDS - top)}"
    missing: list[str] = []
    for path, parser in parsers.items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            if not (action.help or "").strip():
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
        missing.extend(f"{path} {name} (sub-command)"
                       for name, text in _subcommand_help(parser) if not (text or "").strip())
    assert not missing, "no help string:\n" + "\n".join(missing)


def test_up_help_shows_the_default_fleet_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    up = dict(_parsers(build_parser()))["kvroute up"]
    text = up.format_help()
    assert "config/fleet.yaml" in text
    assert "config/routing.yaml" in text



def test_the_readmes_command_list_names_every_top_level_command() -> None:
    """README's "Commands" block left out ``bench`` and ``dashboard``, which ``kvroute
    --help`` lists: a reader of the README did not learn they exist."""
    text = README.read_text()
    block = text.split("## Commands", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    named = set(re.findall(r"^(?:\S+=\S+ )?kvroute ([a-z][a-z-]*)", block, re.MULTILINE))
    commands = {path.split()[1] for path in dict(_parsers(build_parser()))
                if path.count(" ") == 1}
    assert not commands - named, f"not in README's Commands: {sorted(commands - named)}"
