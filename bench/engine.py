"""CPU cost of the engine model: per step (prefill- and decode-heavy) and through advance().

Every scenario runs an ``EngineCore`` (Llama-3.1-8B) on a virtual clock and measures the
process CPU time (``time.process_time``) of the engine calls only:

- ``prefill``: each of ``--prefill-steps`` steps admits and prefills one fresh prompt of
  unique tokens (a full 8192-token budget on H100, a 2048-token chunk on A100);
- ``decode B``: ``step()`` with B requests decoding (B = 1, 32, 128);
- ``advance B``: the same batches through ``advance()``, which coalesces decode steps;
- ``replay``: a Poisson mix of shared-prefix requests through ``advance()``;
- ``mooncake`` (with ``--mooncake N``): the first N rows of the Mooncake conversation trace
  (synthetic tokens per hash id, ``sim.synthetic_tokens``) round-robin over ``--workers``
  H100 engines, advanced to every arrival and every 0.2 s as the simulator does.

"real-time workers" is the virtual time per CPU second: how many such engines one core
could step at real time. Writes ``engine.json`` and ``engine.png`` to ``--out``.

    python -m bench.engine --out bench-results/engine

Prefill and decode scenarios report the fastest of ``--repeat`` fresh runs.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.checks import first_problem, range_problem, refusal
from workers.engine.api import EngineConfig, EngineRequest
from workers.engine.core import EngineCore
from workers.engine.profiles import BUILTIN_GPUS, BUILTIN_MODELS

DECODE_BATCHES = (1, 32, 128)
DEFAULT_TRACE = (Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"
                 / "mooncake_conversation_trace.jsonl.gz")
SCRAPE_INTERVAL_S = 0.2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for engine.json and engine.png")
    parser.add_argument("--steps", type=int, default=400,
                        help="decode steps measured per batch size (default 400)")
    parser.add_argument("--prefill-steps", type=int, default=40,
                        help="steps measured per prefill scenario, each prefilling a fresh "
                             "prompt (8192 tokens on h100, 2048 on a100) (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="fresh runs per prefill/decode scenario; the fastest counts")
    parser.add_argument("--replay-requests", type=int, default=400,
                        help="shared-prefix requests of the replay scenario "
                             "(default %(default)s)")
    parser.add_argument("--hash-algo", default="sha256",
                        help="sha256 (vLLM's, the emulator's) or builtin (the simulator's)")
    parser.add_argument("--mooncake", type=int, default=0, metavar="N",
                        help="also replay the first N Mooncake rows (0: skip; 12031: all)")
    parser.add_argument("--workers", type=int, default=10,
                        help="H100 engines the --mooncake rows go to, round-robin "
                             "(default %(default)s)")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                        help="gzipped Mooncake JSONL trace for --mooncake (default "
                             "../shared/traces/mooncake_conversation_trace.jsonl.gz, relative "
                             "to the repository)")


def _engine(gpu: str, hash_algo: str, **overrides: Any) -> EngineCore:
    config = EngineConfig(model=BUILTIN_MODELS["llama-3.1-8b"], gpu=BUILTIN_GPUS[gpu],
                          hash_algo=hash_algo, **overrides)
    return EngineCore(config)


def _cpu(fn: Callable[[], float]) -> tuple[float, float]:
    """(CPU seconds, virtual seconds) of ``fn``, which returns the virtual time it covered."""
    start = time.process_time()
    virtual = fn()
    return time.process_time() - start, virtual


def _row(name: str, steps: int, cpu_s: float, virtual_s: float) -> dict[str, Any]:
    return {"scenario": name, "steps": steps, "cpu_us_per_step": 1e6 * cpu_s / steps,
            "virtual_ms_per_step": 1e3 * virtual_s / steps,
            "realtime_workers_per_core": virtual_s / cpu_s if cpu_s > 0 else float("inf")}


def best_of(repeat: int, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The fastest of ``repeat`` fresh runs (the others lost time to other processes)."""
    rows = [measure() for _ in range(max(1, repeat))]
    return min(rows, key=lambda r: float(r["cpu_us_per_step"]))


def bench_prefill(gpu: str, tokens: int, steps: int, hash_algo: str) -> dict[str, Any]:
    engine = _engine(gpu, hash_algo)
    rng = random.Random(1)
    prompts = [[rng.randrange(100_000) for _ in range(tokens)] for _ in range(steps)]

    def go() -> float:
        t = 0.0
        for i, prompt in enumerate(prompts):
            engine.add_request(EngineRequest(f"p{i}", prompt, [1]))
            t += engine.step(t).duration_s
        return t

    cpu_s, virtual_s = _cpu(go)
    return _row(f"prefill {tokens} ({gpu})", steps, cpu_s, virtual_s)


def _decoding_engine(batch: int, steps: int, hash_algo: str) -> tuple[EngineCore, float]:
    """B requests of 65 prompt tokens, all past prefill, each with room for ``steps``."""
    engine = _engine("h100", hash_algo)
    for i in range(batch):
        engine.add_request(EngineRequest(f"d{i}", [i % 50_000 + 1] * 64 + [i],
                                         [7] * (steps + 10)))
    t = 0.0
    while any(r.num_output_tokens == 0 for r in engine.scheduler.running) or (
            engine.scheduler.waiting):
        t += engine.step(t).duration_s
    return engine, t


def bench_decode(batch: int, steps: int, hash_algo: str, coalesce: bool) -> dict[str, Any]:
    engine, t0 = _decoding_engine(batch, steps, hash_algo)
    ran = [0]

    def by_step() -> float:
        t = t0
        for _ in range(steps):
            result = engine.step(t)
            t += result.duration_s
            ran[0] += result.num_decode_tokens // batch
        return t - t0

    def by_advance() -> float:
        span = steps * engine.time_model.decode_time(batch, 64 + steps // 2)
        reached, result = engine.advance(t0, t0 + span)
        ran[0] = result.num_decode_tokens // batch
        return reached - t0

    cpu_s, virtual_s = _cpu(by_advance if coalesce else by_step)
    steps = ran[0]
    name = f"{'advance' if coalesce else 'step'} decode B={batch}"
    return _row(name, steps, cpu_s, virtual_s)


def bench_replay(count: int, hash_algo: str) -> dict[str, Any]:
    rng = random.Random(2)
    prefixes = [[rng.randrange(100_000) for _ in range(1024)] for _ in range(8)]
    requests, t = [], 0.0
    for i in range(count):
        t += rng.expovariate(8.0)
        prompt = rng.choice(prefixes) + [rng.randrange(100_000) for _ in range(512)]
        output = [7] * rng.randrange(50, 400)
        requests.append(EngineRequest(f"r{i}", prompt, output, arrival_time=t))
    engine = _engine("h100", hash_algo)

    def go() -> float:
        now, i = 0.0, 0
        while i < len(requests) or engine.has_unfinished_requests():
            while i < len(requests) and requests[i].arrival_time <= now:
                engine.add_request(requests[i])
                i += 1
            if not engine.has_unfinished_requests():
                now = requests[i].arrival_time
                continue
            until = requests[i].arrival_time if i < len(requests) else float("inf")
            now, _ = engine.advance(now, until)
        return now

    cpu_s, virtual_s = _cpu(go)
    row = _row(f"replay {count} requests (advance)", count, cpu_s, virtual_s)
    row["cpu_ms_per_request"] = 1e3 * cpu_s / count
    return row


def bench_mooncake(path: Path, count: int, workers: int, hash_algo: str) -> dict[str, Any]:
    import gzip

    from sim.synthetic_tokens import SyntheticTokens

    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for _, line in zip(range(count), f, strict=False)]
    tokens = SyntheticTokens(0)
    requests = [EngineRequest(f"m{i}", tokens.mooncake_prompt(row["hash_ids"],
                                                              row["input_length"]),
                              [7] * max(1, row["output_length"]),
                              arrival_time=row["timestamp"] / 1000.0)
                for i, row in enumerate(rows)]
    engines = [_engine("h100", hash_algo) for _ in range(workers)]
    clocks = [0.0] * workers

    def advance_all(t: float) -> None:
        for k, engine in enumerate(engines):
            if clocks[k] < t and engine.has_unfinished_requests():
                clocks[k], _ = engine.advance(clocks[k], t)

    def go() -> float:
        next_scrape = 0.0
        for i, request in enumerate(requests):
            while next_scrape <= request.arrival_time:
                advance_all(next_scrape)
                next_scrape += SCRAPE_INTERVAL_S
            advance_all(request.arrival_time)
            k = i % workers
            if not engines[k].has_unfinished_requests():
                clocks[k] = max(clocks[k], request.arrival_time)
            engines[k].add_request(request)
        advance_all(float("inf"))
        return sum(clocks)

    cpu_s, virtual_s = _cpu(go)
    row = _row(f"mooncake {count} rows, {workers} workers (advance)", count, cpu_s, virtual_s)
    row["cpu_s_total"] = cpu_s
    row["mean_prompt_tokens"] = sum(len(r.prompt_token_ids) for r in requests) / count
    hits = sum(e.stats.prefix_cache_hits for e in engines)
    row["prefix_hit_rate"] = hits / max(1, sum(e.stats.prefix_cache_queries for e in engines))
    return row


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["scenario"] for r in rows]
    values = [r["cpu_us_per_step"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.barh(names, values, color="#4477aa")
    ax.set_xscale("log")
    ax.set_xlabel("CPU µs per engine step (per request for the replay rows), log scale")
    ax.set_title("kvroute engine model: CPU cost")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| scenario | steps | CPU µs / step | virtual ms / step | real-time workers / core |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['scenario']} | {r['steps']} | {r['cpu_us_per_step']:.1f} | "
                     f"{r['virtual_ms_per_step']:.2f} | "
                     f"{r['realtime_workers_per_core']:.0f} |")
    return "\n".join(lines)


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    from workers.engine.block_hash import HASH_ALGOS

    if args.hash_algo not in HASH_ALGOS:
        return f"--hash-algo: must be one of {', '.join(HASH_ALGOS)}, got {args.hash_algo!r}"
    problem = first_problem(
        range_problem("--steps", args.steps, 1),
        range_problem("--prefill-steps", args.prefill_steps, 1),
        range_problem("--repeat", args.repeat, 1),
        range_problem("--replay-requests", args.replay_requests, 1),
        range_problem("--mooncake", args.mooncake, 0),
        range_problem("--workers", args.workers, 1))
    if problem is None and args.mooncake:       # read last, after minutes of work
        return _trace_problem(args.trace, args.mooncake)
    return problem


# what ``bench_mooncake`` reads of each row
_MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def _trace_problem(path: Path, count: int) -> str | None:
    """Whether ``path`` holds ``count`` rows of the gzipped Mooncake JSONL ``bench_mooncake``
    reads (checked before the other scenarios run: it is read last)."""
    import gzip

    if not path.is_file():
        return f"--trace: {path}: no such file"
    rows = 0
    try:
        with gzip.open(path, "rt") as f:
            for rows, line in enumerate(f, 1):
                if rows > count:
                    break
                row = json.loads(line)
                missing = [k for k in _MOONCAKE_FIELDS if not isinstance(row, dict)
                           or k not in row]
                if missing:
                    return (f"--trace: {path}:{rows}: not a Mooncake row (no "
                            f"{', '.join(missing)})")
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"--trace: cannot read {path} as gzipped JSONL: {exc}"
    if rows < count:
        return f"--mooncake {count}: {path} has only {rows} rows"
    return None


def run(args: argparse.Namespace) -> int:
    refused = refusal("engine", args, check)
    if refused is not None:
        return refused
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    plan: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("prefill h100", lambda: best_of(args.repeat, lambda: bench_prefill(
            "h100", 8192, args.prefill_steps, args.hash_algo))),
        ("prefill a100", lambda: best_of(args.repeat, lambda: bench_prefill(
            "a100", 2048, args.prefill_steps, args.hash_algo))),
    ]
    for batch in DECODE_BATCHES:
        for coalesce in (False, True):
            label = f"{'advance' if coalesce else 'step'} B={batch}"
            plan.append((label, lambda b=batch, c=coalesce: best_of(  # type: ignore[misc]
                args.repeat, lambda: bench_decode(b, args.steps, args.hash_algo, c))))
    plan.append(("replay", lambda: bench_replay(args.replay_requests, args.hash_algo)))
    if args.mooncake:
        plan.append(("mooncake", lambda: bench_mooncake(args.trace, args.mooncake,
                                                        args.workers, args.hash_algo)))
    for index, (label, fn) in enumerate(plan, 1):
        print(f"[{index}/{len(plan)}] {label} ...", file=sys.stderr, flush=True)
        rows.append(fn())
    command = "python -m bench.engine " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    report = {"command": command.strip(), "hash_algo": args.hash_algo, "rows": rows}
    (out / "engine.json").write_text(json.dumps(report, indent=2) + "\n")
    _plot(rows, out / "engine.png")
    print(markdown_table(rows))
    print(f"wrote {out / 'engine.json'} and {out / 'engine.png'}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine",
                                     description=(__doc__ or "").splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
