"""docs/migrating.md says what is true of this checkout: its flags are ``kvroute serve``'s,
its series are the router's, its fleet files load and its pod-rendering script writes one."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from router.cli import build_parser
from workers.fleet import parse_fleet

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "migrating.md").read_text()


def _section(title: str) -> str:
    return DOC.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _serve_options() -> set[str]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            serve = action.choices["serve"]
            return {option for a in serve._actions for option in a.option_strings}
    raise AssertionError("no serve command")


def test_every_kvroute_flag_of_the_table_is_an_option_of_serve() -> None:
    rows = [line.split("|") for line in _section("Flags").splitlines()
            if line.startswith("| ") and not line.startswith("| You set")]
    named = {flag for row in rows for flag in re.findall(r"`(--[a-z][a-z-]*)", row[2])}
    assert {"--max-retries", "--max-body-bytes", "--eject-after"} <= named
    assert not named - _serve_options(), "flags kvroute serve does not take"


def test_every_series_the_doc_names_is_one_the_router_exports() -> None:
    source = "".join(path.read_text() for path in (ROOT / "router").rglob("*.py"))
    named = set(re.findall(r"kvroute_[a-z_]+", DOC))
    assert {"kvroute_worker_up", "kvroute_retries_total"} <= named
    unknown = [name for name in named
               if f'"{name}"' not in source and f'"{name.removesuffix("_total")}"' not in source]
    assert not unknown, f"series no router module exports: {unknown}"


@pytest.mark.parametrize("block", [b for b in re.findall(r"```yaml\n(.*?)```", DOC, re.DOTALL)
                                   if "workers:" in b])
def test_the_documented_fleet_files_load(block: str) -> None:
    assert parse_fleet(yaml.safe_load(block)).workers


def _pod(name: str, ip: str, ready: bool, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {"app": "vllm", "gpu": "l40s"}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata, "status": {
        "podIP": ip, "conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_the_pod_rendering_script_writes_a_fleet_of_the_ready_pods(
        monkeypatch: pytest.MonkeyPatch) -> None:
    script = re.findall(r"```python\n(.*?)```", _section("Adding and removing workers"),
                        re.DOTALL)[0]
    pods = {"items": [_pod("vllm-b", "10.1.0.8", True), _pod("vllm-a", "10.1.0.7", True),
                      _pod("vllm-c", "10.1.0.9", False),
                      _pod("vllm-d", "10.1.0.10", True, deleting=True)]}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(pods)))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(script, "render_fleet.py", "exec"), {"__name__": "__main__"})
    fleet = parse_fleet(yaml.safe_load(out.getvalue()))
    assert [(w.info.id, w.info.url, w.info.gpu.name) for w in fleet.workers] == [
        ("vllm-a", "http://10.1.0.7:8000", "L40S-48GB"),
        ("vllm-b", "http://10.1.0.8:8000", "L40S-48GB")]
