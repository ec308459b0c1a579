"""Priority under overload: an interactive tenant's time to first token while a batch tenant
floods the fleet, without and with the routing file's ``admission:`` section.

Starts ``kvroute up`` over ``--workers`` emulated H100 workers answering in real time
(Llama-3.1-8B, ``--max-num-seqs`` sequences each, so that a modest flood fills them; free
loopback ports, all stopped at the end), once per setting:

* ``none``: no admission section: every request goes to a worker at once, and what the
  workers cannot run waits in their own queues, first come first served;
* ``limit-fifo``: ``max_in_flight`` = workers x max_num_seqs, every tenant the same
  priority: the excess waits in the router instead, still in arrival order;
* ``limit-priority``: the same limit, tenant ``chat`` at priority 1 and ``batch`` at -1.

In each, ``--flood`` clients of tenant ``batch`` send streamed requests back to back (a
prompt of their own, a quarter of ``--flood-tokens`` to all of it out), and tenant ``chat``
sends a streamed request every ``--probe-interval`` seconds (``--probe-tokens`` out) for
``--seconds`` after a ``--warmup``. Reported per setting: the chat requests' time to first
token and to the end (p50 / p90 / p99), the batch tenant's tokens per second, and the
statuses. First,
``--cost-requests`` requests go through ``Admission`` alone, in this process (a tenant with
both budgets, an in-flight limit, nothing waiting: admit, charge the prompt, settle at the
end), and the thread CPU time per request is reported: what admission adds to a request's
path. Writes
``admission.json`` and ``admission.png`` (the chat TTFT distributions) to ``--out`` and prints
a Markdown table; a line per setting on stderr shows progress.

    python -m bench.admission --out out/admission
    kvroute bench admission --seconds 30 --out out/admission
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.checks import first_problem, range_problem, refusal
from bench.launch import KvrouteUp, LaunchError, wait_all_workers_healthy
from workers.ports import free_port
from workers.project_files import project_path

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SETTINGS = ("none", "limit-fifo", "limit-priority")
ROUTING = project_path("config/routing.yaml")
WORDS = ("tokens", "blocks", "decode", "prefill", "latency", "budget", "tenant", "session",
         "answer", "worker", "queue", "cache", "router", "fleet", "stream", "batch", "priority",
         "slot")


@dataclass
class SettingResult:
    setting: str
    chat_sent: int = 0
    chat_ttft_s: list[float] = field(default_factory=list)
    chat_e2e_s: list[float] = field(default_factory=list)
    batch_tokens: int = 0
    statuses: dict[str, int] = field(default_factory=dict)

    def count(self, status: int) -> None:
        self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=2, help="emulated H100 workers")
    parser.add_argument("--max-num-seqs", type=int, default=8,
                        help="sequences each worker runs at once (the fleet file's)")
    parser.add_argument("--flood", type=int, default=32, help="concurrent batch clients")
    parser.add_argument("--flood-tokens", type=int, default=512,
                        help="a batch request's output: uniform from a quarter of this to this")
    parser.add_argument("--probe-interval", type=float, default=0.5,
                        help="seconds between two chat requests")
    parser.add_argument("--probe-tokens", type=int, default=32,
                        help="a chat request's output tokens")
    parser.add_argument("--seconds", type=float, default=40.0,
                        help="seconds measured per setting")
    parser.add_argument("--warmup", type=float, default=5.0,
                        help="seconds of flood before measuring")
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help="comma-separated settings to run (empty: only the cost)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompts and lengths")
    parser.add_argument("--cost-requests", type=int, default=50_000,
                        help="requests timed through Admission alone (0: skip)")
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for admission.json and admission.png")


def fleet_file(folder: Path, workers: int, max_num_seqs: int) -> Path:
    data = {"models": {MODEL: {"arch": "llama-3.1-8b"}},
            "workers": [{"id": f"h100-{i}", "gpu": "h100", "models": [MODEL],
                         "emulate": {"port": free_port(), "max_num_seqs": max_num_seqs,
                                     "output_len": {"dist": "fixed", "value": 100_000}}}
                        for i in range(workers)]}
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def routing_file(folder: Path, setting: str, max_in_flight: int) -> Path:
    text = ROUTING.read_text()
    if setting != "none":
        priorities = ("    chat: {priority: 1}\n    batch: {priority: -1}\n"
                      if setting == "limit-priority" else "    chat: {}\n    batch: {}\n")
        text += (f"admission:\n  max_in_flight: {max_in_flight}\n  max_waiting: 10000\n"
                 f"  wait_timeout_s: 600\n  tenants:\n{priorities}")
    path = folder / f"routing-{setting}.yaml"
    path.write_text(text)
    return path


async def _stream(session: Any, url: str, tenant: str, prompt: str,
                  max_tokens: int) -> tuple[int, float | None, float, int]:
    """(status, seconds to the first token, seconds to the end, tokens streamed)."""
    started = time.monotonic()
    first: float | None = None
    tokens = 0
    async with session.post(url, headers={"x-tenant": tenant}, json={
            "model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True}) as response:
        if response.status != 200:
            await response.read()
            return response.status, None, time.monotonic() - started, 0
        async for line in response.content:
            if line.startswith(b"data: {"):
                tokens += 1
                if first is None:
                    first = time.monotonic() - started
    return 200, first, time.monotonic() - started, tokens


def _prompt(rng: random.Random, tag: str) -> str:
    return f"{tag} " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(60, 200)))


async def run_setting(setting: str, base_url: str, args: argparse.Namespace) -> SettingResult:
    import aiohttp

    result = SettingResult(setting)
    url = base_url + "/v1/completions"
    rng = random.Random(args.seed)
    measure_from = time.monotonic() + args.warmup
    stop_at = measure_from + args.seconds
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await wait_all_workers_healthy(session, base_url)

        async def flood(client: int) -> None:
            n = 0
            while time.monotonic() < stop_at:
                n += 1
                status, _, _, tokens = await _stream(
                    session, url, "batch", _prompt(rng, f"batch {client} {n}"),
                    rng.randint(max(1, args.flood_tokens // 4), args.flood_tokens))
                if time.monotonic() >= measure_from:
                    result.batch_tokens += tokens
                    result.count(status)

        async def probe(n: int) -> None:
            status, ttft, e2e, _ = await _stream(session, url, "chat",
                                                 _prompt(rng, f"chat {n}"), args.probe_tokens)
            result.count(status)
            if status == 200 and ttft is not None:
                result.chat_ttft_s.append(ttft)
                result.chat_e2e_s.append(e2e)

        floods = [asyncio.create_task(flood(i)) for i in range(args.flood)]
        await asyncio.sleep(max(0.0, measure_from - time.monotonic()))
        probes: list[asyncio.Task[None]] = []
        while time.monotonic() < stop_at:
            probes.append(asyncio.create_task(probe(len(probes))))
            await asyncio.sleep(args.probe_interval)
        result.chat_sent = len(probes)
        await asyncio.gather(*probes, *floods)
    return result


def cost_per_request_us(requests: int) -> dict[str, float]:
    """Thread CPU µs per request of admit + charge_expected + finish, budgets and a limit on
    (median of 5 rounds of ``requests``), and with no section at all."""
    from policies.admission.section import AdmissionSection, TenantBudget
    from router.admission.controller import Admission
    from router.admission.usage import TenantUsage
    from router.metrics import RouterMetrics

    section = AdmissionSection(max_in_flight=1_000_000, tenants={
        "acme": TenantBudget(requests_per_minute=10**9, tokens_per_minute=10**12)})

    async def rounds(configured: AdmissionSection | None) -> float:
        admission = Admission(TenantUsage(), RouterMetrics())
        timings = []
        for _ in range(5):
            started = time.thread_time_ns()
            for _ in range(requests):
                ticket = await admission.admit(configured, "acme", MODEL)
                admission.charge_expected(ticket, 1000, 200)
                admission.record_attempt(ticket, True, 1000, 200)
                admission.finish(ticket)
            timings.append((time.thread_time_ns() - started) / 1e3 / requests)
        return statistics.median(timings)

    return {"budgets_and_limit_us": asyncio.run(rounds(section)),
            "no_section_us": asyncio.run(rounds(None))}


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``): checked before
    Admission's cost is timed and any fleet starts."""
    unknown = [s for s in _settings(args) if s not in SETTINGS]
    if unknown:
        return (f"--settings: unknown setting(s) {', '.join(unknown)} "
                f"(known: {', '.join(SETTINGS)})")
    return first_problem(
        range_problem("--workers", args.workers, 1),
        range_problem("--max-num-seqs", args.max_num_seqs, 1),
        range_problem("--flood", args.flood, 0),
        range_problem("--flood-tokens", args.flood_tokens, 1),
        range_problem("--probe-interval", args.probe_interval, 0, inclusive=False),
        range_problem("--probe-tokens", args.probe_tokens, 1),
        range_problem("--seconds", args.seconds, 0, inclusive=False),
        range_problem("--warmup", args.warmup, 0),
        range_problem("--cost-requests", args.cost_requests, 0))


def _settings(args: argparse.Namespace) -> list[str]:
    return [s.strip() for s in str(args.settings).split(",") if s.strip()]


def run(args: argparse.Namespace) -> int:
    refused = refusal("admission", args, check)
    if refused is not None:
        return refused
    settings = _settings(args)
    cost = cost_per_request_us(args.cost_requests) if args.cost_requests > 0 else {}
    if cost:
        print(f"[admission] cost per request: {cost['budgets_and_limit_us']:.1f} µs with "
              f"budgets and a limit, {cost['no_section_us']:.1f} µs without a section",
              file=sys.stderr)
    results = []
    with tempfile.TemporaryDirectory(prefix="kvroute-admission-") as tmp:
        folder = Path(tmp)
        for setting in settings:
            fleet = fleet_file(folder, args.workers, args.max_num_seqs)
            routing = routing_file(folder, setting, args.workers * args.max_num_seqs)
            try:
                with KvrouteUp(fleet, routing, folder) as up:
                    result = asyncio.run(run_setting(setting, up.base_url, args))
            except LaunchError as exc:
                print(f"kvroute bench admission: {exc}", file=sys.stderr)
                return 1
            results.append(result)
            print(f"[admission] {setting}: chat TTFT p50 {_pct(result.chat_ttft_s, 50):.3f} s, "
                  f"p99 {_pct(result.chat_ttft_s, 99):.3f} s; batch "
                  f"{result.batch_tokens / args.seconds:.0f} tok/s", file=sys.stderr)
    report = {"arguments": {k: str(v) if isinstance(v, Path) else v
                            for k, v in vars(args).items()},
              "cost_per_request": cost, "results": [asdict(r) for r in results]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "admission.json").write_text(json.dumps(report, indent=2) + "\n")
    if results:
        plot(results, args.out / "admission.png")
        print(markdown(results, args.seconds))
    if cost:
        print(f"\nAdmission's own cost per request (thread CPU, median of 5 rounds of "
              f"{args.cost_requests:,}): {cost['budgets_and_limit_us']:.1f} µs with budgets "
              f"and a limit, {cost['no_section_us']:.1f} µs without a section.")
    return 0


def markdown(results: list[SettingResult], seconds: float) -> str:
    lines = ["| setting | chat requests (answered / sent) | chat TTFT p50 / p90 / p99 s | "
             "chat end p50 / p99 s | batch tok/s | statuses |", "|---|---|---|---|---|---|"]
    for r in results:
        ttft, e2e = r.chat_ttft_s, r.chat_e2e_s
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(r.statuses.items()))
        lines.append(
            f"| {r.setting} | {len(ttft)} / {r.chat_sent} | {_pct(ttft, 50):.3f} / "
            f"{_pct(ttft, 90):.3f} / {_pct(ttft, 99):.3f} | {_pct(e2e, 50):.2f} / "
            f"{_pct(e2e, 99):.2f} | {r.batch_tokens / seconds:.0f} | {statuses} |")
    means = [statistics.fmean(r.chat_ttft_s) for r in results if r.chat_ttft_s]
    if means:
        lines.append("")
        lines.append("Mean chat TTFT: " + ", ".join(
            f"{r.setting} {statistics.fmean(r.chat_ttft_s):.3f} s"
            for r in results if r.chat_ttft_s) + ".")
    return "\n".join(lines)


def plot(results: list[SettingResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        ordered = sorted(r.chat_ttft_s)
        if ordered:
            ax.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))],
                    label=r.setting)
    ax.set_xscale("log")
    ax.set_xlabel("chat tenant's time to first token (s)")
    ax.set_ylabel("share of chat requests")
    ax.set_title("Interactive requests under a batch flood")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.admission",
                                     description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
