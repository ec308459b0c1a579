"""The version kvroute reports: ``kvroute --version`` and the start-up log say the installed
distribution's."""

from __future__ import annotations

import pytest

from router.cli import build_parser
from router.version import installed_version


def test_the_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"kvroute {installed_version()}"


def test_an_installed_kvroute_knows_its_version() -> None:
    from importlib.metadata import version

    assert installed_version() == version("kvroute") != "unknown"
