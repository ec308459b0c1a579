"""``kvroute bench``: live benchmarks against emulated workers.

Sub-commands: ``overhead`` (the router overhead race) and ``replay`` (a trace slice through
each router in turn), plus ``engine``, ``emulator``, ``decision``, ``semantic``,
``block-hashes``, ``tokenize``, ``upstream``, ``prefix-match``, ``decode-guard``,
``gc-walk``, ``loop-stall``, ``endpoints``, ``ejection``, ``soak``, ``admission`` and
``redis-sync`` when those modules are installed (each exposes ``add_arguments(parser)`` and
``run(args) -> int``).
"""

from __future__ import annotations

import argparse
import importlib
import math
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.checks import (
    Check,
    cpu_list_problem,
    first_problem,
    out_problem,
    range_problem,
    refusal,
    refuse,
)

DESCRIPTION = "Live benchmarks: router overhead race, trace replay, component benchmarks."
OPTIONAL_MODULES: tuple[tuple[str, str], ...] = (
    ("engine", "bench.engine"), ("emulator", "bench.emulator"),
    ("decision", "bench.decision"), ("semantic", "bench.semantic"),
    ("block-hashes", "bench.block_hashes"), ("tokenize", "bench.tokenize_prompts"),
    ("chat-tools", "bench.chat_tools"),
    ("upstream", "bench.upstream"),
    ("prefix-match", "bench.prefix_match"), ("decode-guard", "bench.decode_guard"),
    ("gc-walk", "bench.gc_walk"),
    ("loop-stall", "bench.loop_stall"),
    ("endpoints", "bench.endpoints"), ("ejection", "bench.ejection"),
    ("soak", "bench.soak"), ("admission", "bench.admission"),
    ("redis-sync", "bench.redis_sync"), ("replica-affinity", "bench.replica_affinity"),
    ("lora-affinity", "bench.lora_affinity"))
DEFAULT_OVERHEAD_TARGETS = "direct,kvroute,kvroute-rr,nginx,sglang-router,vllm-router,litellm"


def register(subparsers: Any) -> None:
    bench = subparsers.add_parser("bench", help=DESCRIPTION, description=DESCRIPTION)
    commands = bench.add_subparsers(dest="bench_command", metavar="BENCH")
    overhead = commands.add_parser("overhead", help="router overhead race (CPU µs/req, RPS)")
    overhead.add_argument("--duration", type=float, default=5.0, metavar="S",
                          help="seconds per phase and target (default 5)")
    overhead.add_argument("--targets", default=DEFAULT_OVERHEAD_TARGETS,
                          help="comma-separated routers, in the order they run; direct: the "
                               "first worker itself, no router (default %(default)s)")
    overhead.add_argument("--concurrency", type=int, default=32,
                          help="requests kept in flight in each closed-loop phase "
                               "(default %(default)s)")
    overhead.add_argument("--unpinned", action="store_true",
                          help="do not pin the router to CPU 1 and the load to CPU 0")
    overhead.add_argument("--backend", choices=("emulator", "mock"), default="emulator",
                          help="the workers: emulator (Python emulated workers, a few hundred "
                               "req/s each; default) or mock (bench/mock_backend.py, "
                               "precomputed answers, tens of thousands of req/s: the router "
                               "is the bottleneck)")
    overhead.add_argument("--backends", type=int, default=2,
                          help="zero-latency workers (default 2)")
    overhead.add_argument("--router-cpus", default="1", help="taskset list for the router")
    overhead.add_argument("--load-cpus", default="0", help="taskset list for the load")
    overhead.add_argument("--backend-cpus", default="0", help="CPU list for the workers")
    overhead.add_argument("--out", type=Path, required=True, metavar="DIR",
                          help="folder for overhead.json, overhead.md and overhead.png")
    overhead.set_defaults(func=_overhead)
    replay = commands.add_parser("replay", help="replay a trace slice through each router")
    replay.add_argument("--trace", type=Path, required=True,
                        help="Mooncake JSONL or Azure CSV trace, gzipped or not")
    replay.add_argument("--targets", default="kvroute,sglang-router,vllm-router",
                        help="comma-separated routers, in the order they run; the hit-rate "
                             "ratios compare the first with each other "
                             "(default kvroute,sglang-router,vllm-router)")
    replay.add_argument("--fleet", type=Path, default=Path("config/fleet.yaml"),
                        help="fleet file; every worker needs an emulate: block "
                             "(default config/fleet.yaml)")
    replay.add_argument("--limit", type=int, default=100,
                        help="the trace's first N requests (default 100)")
    replay.add_argument("--rate-scale", type=float, default=1.0,
                        help="arrival-rate multiplier (2 = twice as fast)")
    replay.add_argument("--time-scale", type=float, default=1.0,
                        help="emulator time scale (1 real time, 0.1 ten times faster, 0 at once: "
                             "no SLO attainment then)")
    replay.add_argument("--max-output-tokens", type=int, default=None,
                        help="cap each request's output length (default: the trace's)")
    replay.add_argument("--client-max-tokens", default="exact", metavar="exact|none|N",
                        help="what clients send as max_tokens: exact (the trace's length, with "
                             "ignore_eos; default), none, or a cap N (raised to longer "
                             "answers); other than exact, the answers keep the trace's "
                             "lengths through min_tokens")
    replay.add_argument("--routing", type=Path, default=None,
                        help="kvroute routing file (default config/routing.yaml)")
    replay.add_argument("--launch", choices=("serve", "up"), default="serve",
                        help="serve: the harness starts the emulated fleet, then kvroute serve "
                             "(default); up: one kvroute up process starts both (kvroute "
                             "targets only)")
    replay.add_argument("--emulator-processes", choices=("one", "each"), default="one",
                        help="emulated workers in one process (default) or one process each")
    replay.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run every target N times, round after round (A B A B), and "
                             "report each one's spread and the hit-rate ratios per round "
                             "(default 1)")
    replay.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for replay.json, replay.md and replay.png")
    replay.set_defaults(func=_replay)
    for name, module_name in OPTIONAL_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue
            raise
        parser = commands.add_parser(name, help=first_sentence(module.__doc__ or name))
        module.add_arguments(parser)
        parser.set_defaults(func=_checked(name, module.run, getattr(module, "check", None)))
    bench.set_defaults(func=lambda args: _usage(bench))


def first_sentence(doc: str) -> str:
    """A docstring's first sentence, on one line (its first line may stop mid-sentence)."""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[:end + 1]


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _checked(name: str, run: Callable[[argparse.Namespace], int], check: Check | None = None
             ) -> Callable[[argparse.Namespace], int]:
    """An optional sub-command's ``run``: a NaN or infinite float option, a missing --fleet or
    --routing file, an option out of its range (the module's ``check``), an --out folder that
    cannot be written, or an unreadable or malformed trace, fleet or routing file ends in one
    line and exit code 2, not a traceback; all but the files' contents before ``run``
    starts."""
    def checked(args: argparse.Namespace) -> int:
        for key, value in vars(args).items():
            option = f"--{key.replace('_', '-')}"
            if isinstance(value, float) and not math.isfinite(value):
                return _refuse(name, f"{option}: must be a finite number, got {value:g}")
            # read raw (bench.launch) or by a router process started later
            if key in ("fleet", "routing") and isinstance(value, Path) and not value.is_file():
                return _refuse(name, f"{option}: {value}: no such file")
        refused = refusal(name, args, check)
        if refused is not None:
            return refused
        from policies.errors import RoutingConfigError
        from sim.traces import TraceError
        from workers.fleet import FleetConfigError
        try:
            return run(args)
        except (TraceError, FleetConfigError, RoutingConfigError) as exc:
            return _refuse(name, str(exc))
    return checked


def _command_line() -> str:
    return "kvroute " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _targets(text: str) -> tuple[str, ...]:
    """The router names of ``--targets``; ValueError names the unknown ones."""
    from bench.targets import TARGETS
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        raise ValueError(f"--targets: unknown target(s) {', '.join(unknown)} "
                         f"(known: {', '.join(TARGETS)})")
    if not names:
        raise ValueError("--targets: give at least one target")
    return names


_refuse = refuse


def _overhead(args: argparse.Namespace) -> int:
    from bench.overhead import OverheadConfig, run_overhead
    from bench.overhead_report import backend_line, markdown_table, write_overhead

    problem = first_problem(range_problem("--duration", args.duration, 0, inclusive=False),
                            range_problem("--concurrency", args.concurrency, 1),
                            range_problem("--backends", args.backends, 1),
                            *(cpu_list_problem(f"--{kind}-cpus", getattr(args, f"{kind}_cpus"))
                              for kind in ("router", "load", "backend")))
    if problem:
        return _refuse("overhead", problem)
    try:
        targets = _targets(args.targets)
    except ValueError as exc:
        return _refuse("overhead", str(exc))
    problem = out_problem(args.out)
    if problem:
        return _refuse("overhead", problem)
    config = OverheadConfig(targets=targets, duration_s=args.duration,
                            concurrency=args.concurrency, pinned=not args.unpinned,
                            backends=args.backends, router_cpus=args.router_cpus,
                            load_cpus=args.load_cpus, backend_cpus=args.backend_cpus,
                            backend=args.backend)
    command = _command_line()
    results = run_overhead(config, _progress,            # written after each target too
                           lambda so_far: write_overhead(args.out, config, so_far, command))
    paths = write_overhead(args.out, config, results, command)
    print(f"Backend: {backend_line(config)}\n")
    print(markdown_table(results))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _replay(args: argparse.Namespace) -> int:
    from bench.replay import ReplayConfig, run_replay
    from bench.replay_report import markdown_table, write_replay

    problem = first_problem(range_problem("--limit", args.limit, 0, inclusive=False),
                            range_problem("--rate-scale", args.rate_scale, 0, inclusive=False),
                            range_problem("--time-scale", args.time_scale, 0),
                            range_problem("--max-output-tokens", args.max_output_tokens, 1),
                            range_problem("--repeat", args.repeat, 1))
    if problem:
        return _refuse("replay", problem)
    from policies.errors import RoutingConfigError
    from policies.loader import load_routing
    from sim.client_max_tokens import ClientMaxTokens
    from sim.traces import TraceError, load_trace
    from workers.fleet import FleetConfigError, load_fleet
    try:
        client_max_tokens = ClientMaxTokens.parse(args.client_max_tokens)
    except ValueError as exc:
        return _refuse("replay", f"--client-max-tokens: {exc}")
    # the files are read before any fleet starts: a typo fails in a second, not mid-run
    try:
        targets = _targets(args.targets)
        fleet = load_fleet(args.fleet)
        if not fleet.workers or not all(w.emulated for w in fleet.workers):
            raise FleetConfigError(f"{args.fleet}: every worker needs an emulate: block")
        if args.routing is not None:
            load_routing(args.routing)
        trace = load_trace(args.trace, limit=args.limit, rate_scale=args.rate_scale)
    except (ValueError, TraceError, FleetConfigError, RoutingConfigError) as exc:
        return _refuse("replay", str(exc))
    if not trace.requests:
        return _refuse("replay", f"{args.trace}: no requests")
    problem = out_problem(args.out)
    if problem:
        return _refuse("replay", problem)
    config = ReplayConfig(trace=args.trace, targets=targets, fleet=args.fleet,
                          limit=args.limit, rate_scale=args.rate_scale,
                          time_scale=args.time_scale, max_output_tokens=args.max_output_tokens,
                          routing=args.routing, launch=args.launch,
                          emulator_processes=args.emulator_processes, repeat=args.repeat,
                          client_max_tokens=client_max_tokens)
    from sim.cache_curve import prefix_ceiling
    ceiling = prefix_ceiling(trace)
    command = _command_line()
    results = run_replay(config, _progress,              # written after each target too
                         lambda so_far: write_replay(args.out, config, so_far, command, ceiling))
    paths = write_replay(args.out, config, results, command, ceiling)
    print(f"infinite-cache prefix ceiling of the slice: {ceiling:.3f}")
    print(markdown_table(results))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
