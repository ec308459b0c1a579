"""How many emulated workers one process sustains at real time under a steady load.

For each worker count N (``--workers 1,2,4,8``) one emulator process hosts N H100 Llama-3-8B
workers at time scale 1.0; every worker gets ``--concurrency`` closed-loop streaming requests
(``--prompt-tokens`` unique prompt tokens, ``--output-tokens`` generated with ignore_eos) for
``--duration`` seconds. The emulator's ``/emulator/stats`` reports each step's lag: how late
the stepping task woke up after the step's scheduled end. N is sustained when the p99 lag of
every worker stays below ``--max-lag-ms``. Also reported: the process's CPU seconds per step
and per streamed token. Writes ``emulator.json`` and ``emulator.png`` to ``--out``.

    python -m bench.emulator --workers 1,2,4,8 --duration 5 --out bench-results/emulator

``--idle-latency`` instead reports what an idle worker's ``/metrics`` says its TTFT for a
2,048-token prompt and its decode step are, on each built-in GPU (compare with
``vllm-interface.md`` §5.4), into ``emulator-idle-latency.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.checks import first_problem, int_list, int_list_problem, range_problem, refusal

DEFAULT_WORKERS = "1,2,4,8"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", default=DEFAULT_WORKERS,
                        help=f"worker counts to try, comma-separated (default {DEFAULT_WORKERS})")
    parser.add_argument("--concurrency", type=int, default=8,
                        help="concurrent streams per worker (default 8)")
    parser.add_argument("--prompt-tokens", type=int, default=512,
                        help="random prompt tokens of each request (default %(default)s)")
    parser.add_argument("--output-tokens", type=int, default=128,
                        help="tokens each request generates, with ignore_eos "
                             "(default %(default)s)")
    parser.add_argument("--duration", type=float, default=5.0, metavar="S",
                        help="measured seconds per worker count (default 5)")
    parser.add_argument("--max-lag-ms", type=float, default=10.0,
                        help="p99 step lag that still counts as real time (default 10 ms)")
    parser.add_argument("--idle-latency", action="store_true",
                        help="instead: an idle worker's TTFT (2048-token prompt) and decode step "
                             "on h100, a100 and l40s, read from /metrics (time scale 0.01)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for emulator.json and emulator.png (with --idle-latency: "
                             "emulator-idle-latency.json)")


def _progress(message: str) -> None:
    print(f"[bench emulator] {message}", file=sys.stderr, flush=True)


def _prompt(rng: random.Random, tokens: int) -> list[int]:
    return [rng.randrange(1000, 90000) for _ in range(tokens)]


async def _client(url: str, rng: random.Random, args: argparse.Namespace, stop_at: float,
                  counts: dict[str, int]) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        while time.monotonic() < stop_at:
            body = {"prompt": _prompt(rng, args.prompt_tokens), "max_tokens": args.output_tokens,
                    "ignore_eos": True, "stream": True}
            async with session.post(f"{url}/v1/completions", json=body) as resp:
                async for line in resp.content:
                    if line.startswith(b"data: {"):
                        counts["chunks"] += 1
            counts["requests"] += 1


async def _get_json(url: str) -> Any:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return await resp.json()


async def _measure(urls: list[str], pid: int, args: argparse.Namespace) -> dict[str, Any]:
    from bench.proc_stats import process_cpu_seconds

    rng = random.Random(7)
    counts = {"chunks": 0, "requests": 0}
    warm_until = time.monotonic() + 1.0
    stop_at = warm_until + args.duration
    clients = [asyncio.create_task(_client(u, random.Random(rng.random()), args, stop_at, counts))
               for u in urls for _ in range(args.concurrency)]
    await asyncio.sleep(1.0)
    for u in urls:
        await _get_json(f"{u}/emulator/stats?reset=1")
    cpu0, t0, chunks0 = process_cpu_seconds(pid), time.monotonic(), counts["chunks"]
    await asyncio.sleep(max(0.0, stop_at - time.monotonic()))
    stats = [await _get_json(f"{u}/emulator/stats") for u in urls]
    cpu, wall = process_cpu_seconds(pid) - cpu0, time.monotonic() - t0
    chunks = counts["chunks"] - chunks0
    await asyncio.gather(*clients, return_exceptions=True)
    steps = sum(int(s["steps"]) for s in stats)
    return {
        "workers": len(urls), "wall_s": wall, "steps": steps, "streamed_tokens": chunks,
        "tokens_per_s": chunks / wall, "cpu_s": cpu, "cpu_util": cpu / wall,
        "cpu_us_per_step": 1e6 * cpu / steps if steps else None,
        "cpu_us_per_token": 1e6 * cpu / chunks if chunks else None,
        "lag_p50_ms": 1e3 * max(float(s["lag_p50_s"]) for s in stats),
        "lag_p99_ms": 1e3 * max(float(s["lag_p99_s"]) for s in stats),
        "lag_max_ms": 1e3 * max(float(s["lag_max_s"]) for s in stats),
        "lag_mean_ms": 1e3 * sum(float(s["lag_mean_s"]) * int(s["steps"]) for s in stats)
        / max(1, steps),
    }


def _write_fleet(directory: Path, n: int) -> Path:
    from workers.ports import free_ports

    fleet = {"models": {"bench/llama-3-8b": {"arch": "llama-3-8b", "max_model_len": 8192}},
             "workers": [{"id": f"h100-{i}", "gpu": "h100", "models": ["bench/llama-3-8b"],
                          "emulate": {"port": port}} for i, port in enumerate(free_ports(n))]}
    path = directory / f"fleet-{n}.yaml"
    path.write_text(yaml.safe_dump(fleet))
    return path


def _plot(results: list[dict[str, Any]], max_lag_ms: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = [r["workers"] for r in results]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(n, [r["lag_p99_ms"] for r in results], "o-", label="p99 step lag")
    ax1.plot(n, [r["lag_p50_ms"] for r in results], "s--", label="p50 step lag")
    ax1.axhline(max_lag_ms, color="red", linestyle=":", label=f"limit {max_lag_ms:g} ms")
    ax1.set_xlabel("emulated workers in one process")
    ax1.set_ylabel("ms")
    ax1.set_title("Step lag (how late steps end)")
    ax1.legend()
    ax2.plot(n, [100 * r["cpu_util"] for r in results], "o-", color="green")
    ax2.set_xlabel("emulated workers in one process")
    ax2.set_ylabel("% of one core")
    ax2.set_title("Emulator process CPU")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def idle_latency(gpus: tuple[str, ...] = ("h100", "a100", "l40s"), prompt_tokens: int = 2048,
                 requests: int = 3) -> dict[str, dict[str, float]]:
    """Mean TTFT and inter-token latency an idle Llama-3-8B worker reports in ``/metrics``."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from workers.emulator.process import EmulatorProcess

    out: dict[str, dict[str, float]] = {}
    for gpu in gpus:
        rng = random.Random(1)
        with EmulatorProcess(gpu=gpu, model="llama-3-8b", time_scale=0.01) as proc:
            for _ in range(requests):
                body = {"prompt": _prompt(rng, prompt_tokens), "max_tokens": 2,
                        "ignore_eos": True}
                req = urllib.request.Request(f"{proc.url}/v1/completions",
                                             data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=60) as resp:
                    resp.read()
            with urllib.request.urlopen(f"{proc.url}/metrics", timeout=10) as resp:
                text = resp.read().decode()
        values = {s.name: s.value for f in text_string_to_metric_families(text)
                  for s in f.samples if "le" not in s.labels}

        out[gpu] = {key: 1e3 * values[f"{name}_sum"] / values[f"{name}_count"]
                    for key, name in (("ttft_ms", "vllm:time_to_first_token_seconds"),
                                      ("inter_token_ms", "vllm:inter_token_latency_seconds"),
                                      ("queue_ms", "vllm:request_queue_time_seconds"))}
        _progress(f"{gpu}: TTFT {out[gpu]['ttft_ms']:.1f} ms, inter-token "
                  f"{out[gpu]['inter_token_ms']:.2f} ms")
    return out


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    return first_problem(
        int_list_problem("--workers", args.workers, 1),
        range_problem("--concurrency", args.concurrency, 1),
        range_problem("--prompt-tokens", args.prompt_tokens, 1),
        range_problem("--output-tokens", args.output_tokens, 1),
        range_problem("--duration", args.duration, 0, inclusive=False),
        range_problem("--max-lag-ms", args.max_lag_ms, 0, inclusive=False))


def run(args: argparse.Namespace) -> int:
    import uvloop

    from workers.emulator.process import EmulatorFleet

    refused = refusal("emulator", args, check)
    if refused is not None:
        return refused
    counts = int_list(args.workers)
    if args.idle_latency:
        idle = {"command": "python -m bench.emulator "
                + " ".join(shlex.quote(a) for a in sys.argv[1:]),
                "prompt_tokens": 2048, "model": "llama-3-8b", "idle_latency": idle_latency()}
        (args.out / "emulator-idle-latency.json").write_text(json.dumps(idle, indent=2))
        return 0
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            _progress(f"{n} worker(s): starting")
            with EmulatorFleet(_write_fleet(Path(tmp), n), time_scale=1.0) as fleet:
                urls = list(fleet.urls.values())
                result = uvloop.run(_measure(urls, fleet.pids[0], args))
            result["sustained"] = result["lag_p99_ms"] <= args.max_lag_ms
            results.append(result)
            _progress(f"{n} worker(s): p99 lag {result['lag_p99_ms']:.2f} ms, CPU "
                      f"{100 * result['cpu_util']:.0f}%, {result['tokens_per_s']:.0f} tok/s, "
                      f"{'sustained' if result['sustained'] else 'NOT sustained'}")
    sustained = [r["workers"] for r in results if r["sustained"]]
    summary = {
        "command": "python -m bench.emulator " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "params": {"concurrency": args.concurrency, "prompt_tokens": args.prompt_tokens,
                   "output_tokens": args.output_tokens, "duration_s": args.duration,
                   "max_lag_ms": args.max_lag_ms, "gpu": "h100", "model": "llama-3-8b"},
        "max_sustained_workers": max(sustained) if sustained else 0,
        "results": results,
    }
    (args.out / "emulator.json").write_text(json.dumps(summary, indent=2))
    _plot(results, args.max_lag_ms, args.out / "emulator.png")
    _progress(f"wrote {args.out / 'emulator.json'} and {args.out / 'emulator.png'}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.emulator", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
