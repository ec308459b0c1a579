"""Default files: the working directory first, then the checkout; a clear error otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers import project_files
from workers.project_files import (
    DEFAULT_FLEET,
    MissingDefaultFile,
    default_file,
    find_default,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_checkout_is_the_folder_holding_the_packages() -> None:
    assert project_files.CHECKOUT == ROOT
    assert (ROOT / DEFAULT_FLEET).is_file()


def test_the_working_directorys_file_comes_first(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / DEFAULT_FLEET).write_text("workers: []\n")
    monkeypatch.chdir(tmp_path)
    assert find_default(DEFAULT_FLEET) == Path(DEFAULT_FLEET)
    assert default_file(DEFAULT_FLEET, "--fleet").resolve() == tmp_path / DEFAULT_FLEET


def test_from_another_directory_the_checkouts_file_is_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert default_file(DEFAULT_FLEET, "--fleet") == ROOT / DEFAULT_FLEET


def test_nowhere_names_the_option_and_where_it_looked(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "pyproject.toml").write_text("")
    monkeypatch.setattr(project_files, "CHECKOUT", checkout)
    assert find_default(DEFAULT_FLEET) is None
    with pytest.raises(MissingDefaultFile) as raised:
        default_file(DEFAULT_FLEET, "--fleet")
    assert str(raised.value) == (
        f"config/fleet.yaml: no such file in this directory or in the kvroute checkout "
        f"({checkout}); it is the default of --fleet: pass --fleet FILE")


def test_an_installed_kvroute_says_it_has_no_config_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(project_files, "CHECKOUT", tmp_path / "site-packages")
    with pytest.raises(MissingDefaultFile, match=r"config/routing.yaml: no such file in this "
                       r"directory \(an installed kvroute carries no config/ folder\); it is "
                       r"the default of --routing: pass --routing FILE"):
        default_file("config/routing.yaml", "--routing")
