"""``kvroute dashboard``: ``build`` writes the Grafana JSON of kvroute's dashboards;
``snapshot`` renders every dashboard's panels from a live Prometheus to PNG files.

    kvroute dashboard build [--out config/grafana/dashboards] [--check]
    kvroute dashboard snapshot --prometheus http://127.0.0.1:9090 --out docs/img \\
        [--dashboards config/grafana/dashboards] [--range 15m] [--step 5s] \\
        [--rate-interval 1m] [--end UNIX_SECONDS] [--var worker=h100-0 ...]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from workers.project_files import default_dir

DEFAULT_DIR = "config/grafana/dashboards"      # here, else in the checkout (workers.project_files)
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(text: str) -> float:
    """``15m`` -> 900.0; raises ``argparse.ArgumentTypeError`` naming the bad value."""
    m = _DURATION.match(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"not a duration like 30s, 15m, 1h: {text!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def _prom_duration(text: str) -> str:
    duration_s(text)
    return text


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("dashboard", help="Grafana dashboards: build JSON, "
                                   "render PNG snapshots from Prometheus")
    sub = parser.add_subparsers(dest="dashboard_command", metavar="ACTION", required=True)
    build = sub.add_parser("build", help="write the dashboards' Grafana JSON")
    build.add_argument("--out", type=Path, default=None,
                       help="folder the dashboards' JSON files are written to, or compared "
                            f"with under --check (default {DEFAULT_DIR}, in this directory "
                            "or else in the kvroute checkout)")
    build.add_argument("--check", action="store_true",
                       help="exit 1 if the files differ from the definitions; write nothing")
    build.set_defaults(func=_build)
    snap = sub.add_parser("snapshot", help="render each dashboard's panels to PNG")
    snap.add_argument("--prometheus", required=True, metavar="URL",
                      help="base URL of the Prometheus to query, e.g. http://127.0.0.1:9090")
    snap.add_argument("--out", type=Path, required=True, metavar="DIR",
                      help="folder for one PNG per dashboard, named after its JSON file")
    snap.add_argument("--dashboards", type=Path, default=None, metavar="DIR",
                      help=f"folder whose *.json dashboards are rendered (default "
                           f"{DEFAULT_DIR}, in this directory or else in the kvroute checkout)")
    snap.add_argument("--range", type=duration_s, default=900.0, dest="range_s",
                      help="time span ending at --end (default 15m)")
    snap.add_argument("--end", type=float, default=None, help="unix seconds (default now)")
    snap.add_argument("--step", type=duration_s, default=None, dest="step_s",
                      help="query resolution (default: range / 240, at least 1s)")
    snap.add_argument("--rate-interval", type=_prom_duration, default="1m",
                      help="value of $__rate_interval (default 1m)")
    snap.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                      help="fix a template variable (repeat for several values); "
                           "others take every value Prometheus has")
    snap.set_defaults(func=_snapshot)


def _build(args: argparse.Namespace) -> int:
    from router.dashboard.definitions import DASHBOARDS
    from router.dashboard.grafana import dashboard_json

    out = args.out if args.out is not None else default_dir(DEFAULT_DIR)
    stale, missing = [], []
    for dashboard in DASHBOARDS:
        path = out / dashboard.file_name
        text = json.dumps(dashboard_json(dashboard), indent=2) + "\n"
        if args.check:
            if not path.is_file():
                missing.append(str(path))
            elif path.read_text() != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(path)
    if missing:
        print("missing (run kvroute dashboard build, or give --out): " + ", ".join(missing),
              file=sys.stderr)
    if stale:
        print("out of date (run kvroute dashboard build): " + ", ".join(stale),
              file=sys.stderr)
    return 1 if missing or stale else 0


def _chosen(pairs: list[str]) -> dict[str, list[str]]:
    chosen: dict[str, list[str]] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--var {pair!r}: expected NAME=VALUE")
        chosen.setdefault(name, []).append(value)
    return chosen


def _snapshot(args: argparse.Namespace) -> int:
    from router.dashboard.prometheus_api import PrometheusClient, PrometheusError
    from router.dashboard.render import QueryWindow, render_dashboard
    from router.dashboard.variables import VariableError, resolve_variables

    folder = args.dashboards if args.dashboards is not None else default_dir(DEFAULT_DIR)
    files = sorted(folder.glob("*.json"))
    if not files:
        print(f"kvroute dashboard snapshot: no *.json dashboards in {folder}",
              file=sys.stderr)
        return 2
    end = args.end if args.end is not None else time.time()
    step = args.step_s or max(1.0, args.range_s / 240)
    window = QueryWindow(end - args.range_s, end, step, args.rate_interval)
    client = PrometheusClient(args.prometheus)
    try:
        chosen = _chosen(args.var)
        for path in files:
            dashboard = json.loads(path.read_text())
            values = resolve_variables(dashboard, client, chosen)
            snapshot = render_dashboard(dashboard, client, values, window,
                                        args.out / f"{path.stem}.png")
            print(f"{snapshot.path}: {snapshot.panels} panels")
            for title in snapshot.empty_panels:
                print(f"{path.name}: panel {title!r}: no data", file=sys.stderr)
    except (PrometheusError, VariableError, ValueError) as exc:
        print(f"kvroute dashboard snapshot: {exc}", file=sys.stderr)
        return 1
    return 0
