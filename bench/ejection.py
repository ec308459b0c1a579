"""What setting aside a failing worker saves clients: the same requests through ``kvroute up``
with both protections on (``--eject-after`` and ``--stall-after``), with ejection only, and
with neither, while one emulated worker of the fleet fails.

The fleet: ``--workers`` emulated H100s serving Llama-3.1-8B (``--time-scale``), each on a
free loopback port; the first is given a fault whose requests fail while its ``/metrics``
keeps answering (so scrapes never mark it down):

* ``stall``: every generation stops after its first token and never finishes (a hung engine:
  the client waits for ``--upstream-timeout`` and gets a 504, not retried since the answer
  had begun);
* ``error``: every generation answered with a 500 (the router retries it elsewhere, so the
  client pays a failed round trip).

For each setting a fresh ``kvroute up`` (the routing file given, default
``config/routing.yaml``) gets ``--requests`` short chat completions arriving at ``--rate`` a
second (open loop: one does not wait for another); the report gives their statuses, latency
p50 / p99 / max, and the router's own counts of retries, ejections and stalls. Writes
``ejection.json`` to ``--out`` and prints a table.

    python -m bench.ejection --fault stall --upstream-timeout 10 --out out/ejection
    kvroute bench ejection --fault error --out out/ejection-error
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from bench.checks import first_problem, range_problem, refusal
from bench.launch import KvrouteUp, LaunchError, wait_all_workers_healthy
from bench.metrics_scrape import scrape_totals
from workers.ports import free_ports
from workers.project_files import project_path

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
FAULTS = {"error": {"error_rate": 1.0}, "stall": {"stall_after_tokens": 1}}
COUNTERS = ("kvroute_retries", "kvroute_worker_ejections", "kvroute_worker_stalls")


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    eject_after: int
    stall_after_s: float


@dataclass(frozen=True, slots=True)
class SettingResult:
    name: str
    eject_after: int
    stall_after_s: float
    statuses: dict[str, int]          # status -> requests
    p50_ms: float
    p99_ms: float
    max_ms: float
    retries: float                    # kvroute_retries_total, all workers
    ejections: float                  # kvroute_worker_ejections_total, all workers
    stalls: float                     # kvroute_worker_stalls_total, all workers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fault", choices=sorted(FAULTS), default="stall",
                        help="what is wrong with the first worker (default %(default)s)")
    parser.add_argument("--workers", type=int, default=3, help="emulated workers (default 3)")
    parser.add_argument("--requests", type=int, default=300,
                        help="chat completions per setting (default %(default)s)")
    parser.add_argument("--rate", type=float, default=50.0,
                        help="their arrivals a second, evenly spaced (default %(default)s)")
    parser.add_argument("--upstream-timeout", type=float, default=10.0,
                        help="the router's --upstream-timeout, seconds (default %(default)s)")
    parser.add_argument("--eject-after", type=int, default=5,
                        help="the router's --eject-after when on (default %(default)s)")
    parser.add_argument("--stall-after", type=float, default=1.0,
                        help="the router's --stall-after when on, seconds (default "
                             "%(default)s)")
    parser.add_argument("--time-scale", type=float, default=0.05,
                        help="the emulated workers' time scale (default %(default)s)")
    parser.add_argument("--routing", type=Path, default=project_path("config/routing.yaml"),
                        help="routing file of the router (default config/routing.yaml)")
    parser.add_argument("--out", type=Path, required=True, help="folder for ejection.json")


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    return first_problem(
        range_problem("--workers", args.workers, 2),    # a failing one and a healthy one
        range_problem("--requests", args.requests, 1),
        range_problem("--rate", args.rate, 0, inclusive=False),
        range_problem("--upstream-timeout", args.upstream_timeout, 0, inclusive=False),
        range_problem("--eject-after", args.eject_after, 1),
        range_problem("--stall-after", args.stall_after, 0, inclusive=False),
        range_problem("--time-scale", args.time_scale, 0))


def run(args: argparse.Namespace) -> int:
    refused = refusal("ejection", args, check)
    if refused is not None:
        return refused
    settings = (Setting("both", args.eject_after, args.stall_after),
                Setting("ejection only", args.eject_after, 0.0), Setting("neither", 0, 0.0))
    results = []
    for setting in settings:
        print(f"[ejection] {setting.name}: --eject-after {setting.eject_after} --stall-after "
              f"{setting.stall_after_s:g}, {args.requests} requests, {args.fault} fault",
              file=sys.stderr, flush=True)
        try:
            results.append(_one_setting(args, setting))
        except LaunchError as exc:
            print(f"kvroute bench ejection: {exc}", file=sys.stderr)
            return 1
    report = {"fault": args.fault, "workers": args.workers, "requests": args.requests,
              "rate": args.rate, "upstream_timeout_s": args.upstream_timeout,
              "time_scale": args.time_scale, "routing": str(args.routing),
              "settings": [asdict(r) for r in results]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ejection.json").write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(results))
    return 0


def _fleet(folder: Path, workers: int, fault: str, time_scale: float) -> Path:
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump({
        "models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192}},
        "workers": [{"id": f"h100-{i}", "gpu": "h100", "models": [MODEL],
                     "emulate": {"port": port, "time_scale": time_scale,
                                 "output_len": {"dist": "fixed", "value": 16},
                                 **({"faults": FAULTS[fault]} if i == 0 else {})}}
                    for i, port in enumerate(free_ports(workers))]}))
    return path


def _one_setting(args: argparse.Namespace, setting: Setting) -> SettingResult:
    with tempfile.TemporaryDirectory(prefix="kvroute-ejection-") as tmp:
        fleet = _fleet(Path(tmp), args.workers, args.fault, args.time_scale)
        with KvrouteUp(fleet, args.routing, Path(tmp), "--time-scale", str(args.time_scale),
                       "--upstream-timeout", str(args.upstream_timeout), "--eject-after",
                       str(setting.eject_after), "--stall-after",
                       str(setting.stall_after_s)) as router:
            answers = asyncio.run(_send(router.base_url, args))
            counts = scrape_totals(router.base_url + "/metrics", COUNTERS) or {}
    statuses: dict[str, int] = {}
    for _, status in answers:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    ordered = sorted(ms for ms, _ in answers)
    return SettingResult(
        name=setting.name, eject_after=setting.eject_after,
        stall_after_s=setting.stall_after_s, statuses=dict(sorted(statuses.items())),
        p50_ms=statistics.median(ordered),
        p99_ms=ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], max_ms=ordered[-1],
        retries=counts.get("kvroute_retries", 0.0),
        ejections=counts.get("kvroute_worker_ejections", 0.0),
        stalls=counts.get("kvroute_worker_stalls", 0.0))


async def _send(base_url: str, args: argparse.Namespace) -> list[tuple[float, int]]:
    """Every request's latency (ms) and status, sent open loop at ``args.rate``."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=args.upstream_timeout + 30.0)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await wait_all_workers_healthy(session, base_url)

        async def one(n: int) -> tuple[float, int]:
            started = time.perf_counter()
            async with session.post(base_url + "/v1/chat/completions", json={
                    "model": MODEL, "max_tokens": 16, "messages": [
                        {"role": "user", "content": f"Request {n}: say something."}]}) as resp:
                await resp.read()
            return (time.perf_counter() - started) * 1e3, resp.status

        tasks = []
        began = time.perf_counter()
        for n in range(args.requests):
            delay = began + n / args.rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(n)))
        return list(await asyncio.gather(*tasks))


def markdown(results: list[SettingResult]) -> str:
    lines = ["| setting | --eject-after | --stall-after | statuses | p50 ms | p99 ms | max ms | "
             "retries | ejections | stalls |", "|---|--:|--:|---|--:|--:|--:|--:|--:|--:|"]
    for r in results:
        statuses = ", ".join(f"{status}: {count}" for status, count in r.statuses.items())
        lines.append(f"| {r.name} | {r.eject_after} | {r.stall_after_s:g} | {statuses} | "
                     f"{r.p50_ms:.1f} | {r.p99_ms:.1f} | {r.max_ms:.1f} | {r.retries:.0f} | "
                     f"{r.ejections:.0f} | {r.stalls:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ejection",
                                     description=__doc__.split("\n", 1)[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
