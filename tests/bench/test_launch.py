"""``bench.launch.KvrouteUp``: ``kvroute up`` on a free port, ready once entered, stopped on
leaving, and stopped too when it never becomes ready."""

from __future__ import annotations

import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from bench.launch import (
    REPO_ROOT,
    KvrouteUp,
    LaunchError,
    checkout_env,
    emulated_fleet_on_free_ports,
    python_module,
)

pytestmark = pytest.mark.integration


def _children() -> set[int]:
    pid = os.getpid()
    return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def test_it_serves_once_entered_and_is_stopped_on_leaving(tmp_path: Path) -> None:
    fleet, _ = emulated_fleet_on_free_ports(REPO_ROOT / "config" / "fleets" /
                                           "reference-h100.yaml", tmp_path)
    before = _children()
    with KvrouteUp(fleet, REPO_ROOT / "config" / "routing.yaml", tmp_path,
                   "--time-scale", "0") as router:
        with urllib.request.urlopen(router.base_url + "/v1/models", timeout=5) as answer:
            assert answer.status == 200
        assert router.pid in _children()
    assert _children() <= before


def test_paths_relative_to_the_callers_directory_are_read_from_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The router runs in the checkout's directory: a routing file named relative to the
    caller's was looked for there (`cannot read routing file` after the checks passed)."""
    fleet, _ = emulated_fleet_on_free_ports(REPO_ROOT / "config" / "fleets" /
                                           "reference-h100.yaml", tmp_path)
    (tmp_path / "my-routing.yaml").write_text((REPO_ROOT / "config" / "routing.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    with KvrouteUp(Path(fleet.name), Path("my-routing.yaml"), Path("logs"),
                   "--time-scale", "0") as router:
        answer = urllib.request.urlopen(router.base_url + "/v1/models", timeout=5)
        assert answer.status == 200
        answer.close()


def test_one_that_never_becomes_ready_is_stopped_and_says_why(tmp_path: Path) -> None:
    fleet, _ = emulated_fleet_on_free_ports(REPO_ROOT / "config" / "fleets" /
                                           "reference-h100.yaml", tmp_path)
    routing = tmp_path / "routing.yaml"
    routing.write_text("profiles: {default: {picker: {type: no-such-picker}}}\n")
    before = _children()
    with (pytest.raises(LaunchError, match="kvroute up exited with"),
          KvrouteUp(fleet, routing, tmp_path)):
        pass
    assert _children() <= before


def test_a_child_imports_this_checkouts_kvroute_whatever_its_directory_holds(
        tmp_path: Path) -> None:
    """Started with ``python_module`` and ``checkout_env``, a benchmark's child imports the
    checkout it was started from: not a folder of the working directory named like one of
    kvroute's packages, nor another checkout the interpreter has installed."""
    decoy = tmp_path / "router"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise SystemExit('the working directory was imported')\n")
    (decoy / "version.py").write_text("")
    argv = python_module("router.version")
    probe = [argv[0], argv[1], "-c", "import router; print(router.__file__)"]
    done = subprocess.run(probe, cwd=tmp_path, env=checkout_env({"PYTHONPATH": str(tmp_path)}),
                          capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == REPO_ROOT / "router" / "__init__.py"
