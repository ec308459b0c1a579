"""The router's memory under sustained traffic in which no two requests are alike.

Every store the router keeps per prompt, tenant, session or response is bounded: the token
cache, the prefix indexes, the prefix ceiling, the output-length statistics per tenant, the
response owners, the decision log, the metric labels. This benchmark shows the bounds hold in
the running process: it starts ``kvroute up`` on a fleet of emulated workers answering at
once (``--time-scale 0``; default ``config/fleets/reference-h100.yaml``, each worker on a free
loopback port; all stopped at the end) and sends ``--requests`` requests, ``--concurrency``
at a time, each unlike every other:

* a prompt of its own (its number, then 20 to 400 words drawn from a seeded generator), so
  every block hash and every tokenized text is new;
* its own ``x-tenant`` and ``x-session-id``;
* one in three streamed, one in ten a Responses API turn (whose owner the router records),
  the rest chat completions; ``max_tokens`` 1 to 64.

After every ``--sample-every`` answers it reads the resident memory of the router's process
alone (``/proc/PID/statm``; the emulated workers run in a process of their own), and at the
end the requests the router still counts in flight (``kvroute_worker_requests{state=
"inflight"}`` summed over workers: 0 when every answer was accounted for). Reported: each
sample (answers, seconds, RSS), the peak, the growth over the second half of the run in MiB
per 10,000 requests (near 0 once every store is at its bound) and the errors.

Writes ``soak.json`` and ``soak.png`` (RSS against answers) to ``--out`` and prints a Markdown
table; a line per sample on stderr shows progress.

    python -m bench.soak --requests 150000 --out out/soak
    kvroute bench soak --requests 20000 --sample-every 2000 --out out/soak
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.checks import first_problem, range_problem, refusal, refuse
from bench.endpoints import models_by_runner
from bench.launch import (
    KvrouteUp,
    LaunchError,
    emulated_fleet,
    emulated_fleet_on_free_ports,
    wait_all_workers_healthy,
)
from bench.proc_stats import process_rss_bytes
from workers.project_files import project_path

DEFAULT_FLEET = project_path("config/fleets/reference-h100.yaml")
VOCABULARY = ("the router sends each request to the worker whose cache holds its prefix and "
              "whose queue lets it start soonest while a cheaper card serves what it can in "
              "time tokens blocks decode prefill latency budget tenant session answer")
WORDS = tuple(VOCABULARY.split())
MIB = 2 ** 20
STREAM_EVERY = 3
RESPONSES_EVERY = 10


@dataclass(frozen=True, slots=True)
class Sample:
    answered: int
    seconds: float
    rss_mib: float


@dataclass(slots=True)
class SoakResult:
    requests: int
    concurrency: int
    samples: list[Sample] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    inflight_after: float | None = None     # None: the router exported no such series

    @property
    def peak_rss_mib(self) -> float:
        return max((s.rss_mib for s in self.samples), default=0.0)

    @property
    def growth_second_half_mib_per_10k(self) -> float:
        """RSS growth from the sample nearest the run's middle to the last, per 10,000
        answers (0 with fewer than two samples)."""
        if len(self.samples) < 2:
            return 0.0
        last = self.samples[-1]
        middle = min(self.samples[:-1], key=lambda s: abs(s.answered - last.answered / 2))
        return (last.rss_mib - middle.rss_mib) / (last.answered - middle.answered) * 1e4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fleet", type=Path, default=DEFAULT_FLEET,
                        help="fleet file of emulated workers serving a generative model; "
                             "their ports are replaced by free ones (default %(default)s)")
    parser.add_argument("--routing", type=Path, default=project_path("config/routing.yaml"),
                        help="routing file (default config/routing.yaml)")
    parser.add_argument("--requests", type=int, default=150_000,
                        help="requests to send, all different (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=32,
                        help="requests kept in flight (default %(default)s)")
    parser.add_argument("--sample-every", type=int, default=10_000, metavar="N",
                        help="read the router's RSS after every N answers (default "
                             "%(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="prompt generator seed")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for soak.json and soak.png")


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    problem = first_problem(range_problem("--requests", args.requests, 1),
                            range_problem("--concurrency", args.concurrency, 1),
                            range_problem("--sample-every", args.sample_every, 1))
    if problem:
        return problem
    try:
        model = models_by_runner(emulated_fleet(args.fleet)).get("generate")
    except ValueError as exc:
        return str(exc)
    return None if model is not None else f"{args.fleet}: no worker serves a generative model"


def run(args: argparse.Namespace) -> int:
    refused = refusal("soak", args, check)
    if refused is not None:
        return refused
    with tempfile.TemporaryDirectory(prefix="kvroute-soak-") as tmp:
        try:
            fleet_path, fleet = emulated_fleet_on_free_ports(args.fleet, Path(tmp))
            model = models_by_runner(fleet).get("generate")
        except ValueError as exc:
            return _refuse(str(exc))
        if model is None:
            return _refuse(f"{args.fleet}: no worker serves a generative model")
        result = SoakResult(args.requests, args.concurrency)
        try:
            with KvrouteUp(fleet_path, args.routing, Path(tmp), "--time-scale", "0",
                           log_level="ERROR") as router:
                asyncio.run(_soak(router.base_url, router.pid, model, args, result))
        except LaunchError as exc:
            print(f"kvroute bench soak: {exc}", file=sys.stderr)
            return 1
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"fleet": str(args.fleet), "routing": str(args.routing), "seed": args.seed,
              **asdict(result), "peak_rss_mib": result.peak_rss_mib,
              "growth_second_half_mib_per_10k": result.growth_second_half_mib_per_10k}
    (args.out / "soak.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(result, args.out / "soak.png")
    print(markdown(result))
    return 0


def _refuse(message: str) -> int:
    return refuse("soak", message)


def request_of(number: int, model: str, seed: int) -> tuple[str, dict[str, Any]]:
    """The path and body of request ``number``: a prompt of its own (the same for the same
    seed), streamed one time in ``STREAM_EVERY``, a Responses API turn one time in
    ``RESPONSES_EVERY``."""
    rng = random.Random(f"{seed}:{number}")
    text = f"{number} " + " ".join(rng.choices(WORDS, k=rng.randint(20, 400)))
    stream = number % STREAM_EVERY == 0
    max_tokens = rng.randint(1, 64)
    if number % RESPONSES_EVERY == 0:
        return "/v1/responses", {"model": model, "input": text, "stream": stream,
                                 "max_output_tokens": max_tokens}
    return "/v1/chat/completions", {"model": model, "stream": stream, "max_tokens": max_tokens,
                                    "messages": [{"role": "user", "content": text}]}


async def _soak(base_url: str, router_pid: int, model: str, args: argparse.Namespace,
                result: SoakResult) -> None:
    import aiohttp

    numbers = iter(range(args.requests))
    answered = 0
    started = time.monotonic()

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal answered
        for number in numbers:
            path, body = request_of(number, model, args.seed)
            headers = {"x-tenant": f"tenant-{number}", "x-session-id": f"session-{number}"}
            try:
                async with session.post(base_url + path, json=body, headers=headers) as resp:
                    payload = await resp.read()
                    if resp.status != 200:
                        _count_error(result, f"{path}: {resp.status} {payload[:200]!r}")
            except aiohttp.ClientError as exc:
                _count_error(result, f"{path}: {type(exc).__name__}: {exc}")
            answered += 1
            if answered % args.sample_every == 0 or answered == args.requests:
                sample = Sample(answered, round(time.monotonic() - started, 2),
                                round(process_rss_bytes(router_pid) / MIB, 1))
                result.samples.append(sample)
                print(f"[soak] {sample.answered} answered in {sample.seconds:.0f} s: router "
                      f"RSS {sample.rss_mib:.1f} MiB, {result.errors} errors",
                      file=sys.stderr, flush=True)

    connector = aiohttp.TCPConnector(limit=args.concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await wait_all_workers_healthy(session, base_url)
        await asyncio.gather(*(client(session) for _ in range(args.concurrency)))
        async with session.get(base_url + "/metrics") as resp:
            result.inflight_after = inflight_requests(await resp.text())


def _count_error(result: SoakResult, message: str) -> None:
    result.errors += 1
    if not result.first_error:
        result.first_error = message


def inflight_requests(exposition: str) -> float | None:
    """The sum of ``kvroute_worker_requests{state="inflight"}`` in a /metrics text (None
    when it has no such series)."""
    from prometheus_client.parser import text_string_to_metric_families

    values = [sample.value for family in text_string_to_metric_families(exposition)
              if family.name == "kvroute_worker_requests" for sample in family.samples
              if sample.labels.get("state") == "inflight"]
    return sum(values) if values else None


def markdown(result: SoakResult) -> str:
    lines = ["| answered | seconds | router RSS MiB |", "|---|---|---|"]
    lines += [f"| {s.answered} | {s.seconds:.0f} | {s.rss_mib:.1f} |" for s in result.samples]
    lines += ["", f"{result.requests} requests, {result.concurrency} at a time: peak "
              f"{result.peak_rss_mib:.1f} MiB; second half "
              f"{result.growth_second_half_mib_per_10k:+.1f} MiB per 10,000 requests; "
              f"{result.errors} errors; {_inflight(result.inflight_after)} at the end."]
    if result.first_error:
        lines.append(f"First error: {result.first_error}")
    return "\n".join(lines)


def _inflight(value: float | None) -> str:
    return ("no in-flight series exported" if value is None
            else f"{value:g} still counted in flight")


def plot(result: SoakResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([s.answered for s in result.samples], [s.rss_mib for s in result.samples],
            marker="o")
    ax.set_xlabel("requests answered (no two alike)")
    ax.set_ylabel("router RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title("Router memory under sustained traffic")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
