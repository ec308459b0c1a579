"""Decision time of a routing policy at 8 to 1,000 workers, and prefix-index memory per block.

For each fleet size a synthetic fleet (H100 : A100 : L40S = 1 : 2 : 2, Llama-3-8B) is built
with random but plausible load (running, waiting, KV usage, in-flight prefill) and the
policy routes a stream of requests drawn from a shared-prefix workload (``--prefixes``
system prompts, each followed by a unique tail, as the ``array('i')`` of token ids the tokens
producer makes of a text). Producers (tokens are given; the block
hashes) run before the clock starts, as in the router, and the first ``--warmup`` decisions
fill the prefix index; then ``PolicyEngine.decide`` is timed alone (``perf_counter_ns``)
for ``--decisions`` requests (wall clock, and the thread's CPU time, which a busy machine
does not inflate), each followed by ``on_routed`` (outside the decision's time, its own
CPU reported apart) so the index keeps learning; garbage collections that start inside a
timed ``decide`` are counted (``collections_in_decide``; ``--no-gc`` disables the collector
while the decisions run, to tell its share of the tail), and every collection while the
timed decisions run, inside ``decide`` or not, is timed (thread CPU, by generation).
Collections run as in the router (``--gc loop``, ``router/collector.py``): the one due, if
any, after each decision and its ``on_routed``, where the router's event loop runs it
between requests; ``--gc allocations`` leaves them to CPython, inside whatever allocates.

Requests arrive 10 ms apart. By default none of them finishes: the decode guard forgets
each at its estimated end, and the online correction of the estimates never learns, so every
decision takes its path for an estimator with nothing learnt. With ``--complete`` each one
finishes as a router would see it: at its arrival plus an observed TTFT and decode time,
each its estimate times a seeded log-normal error (σ ``--observed-spread``), reported to
``on_completed`` before the first decision that arrives after it (outside the timing). The
correction and the output-length producer then learn (``corrected``), and the routed
requests stay alive until they finish, as in a router, for the garbage collector to walk.
``held_incumbents`` reports the most incumbents the guard held on one worker at the end.

Memory: ``tracemalloc`` around filling an approximate index, and an exact (KV-event) index,
with a known number of blocks.

Last, a fixed loop is timed the same way (``machine_floor``): its p99 / p50 is the tail the
machine itself adds, against which the decisions' p99 reads.

Writes ``decision.json`` and ``decision.png`` to ``--out`` and prints a Markdown table.

    python -m bench.decision --out out/decision
    kvroute bench decision --workers 8,10,64,1000 --decisions 2000 --out out/decision
"""

from __future__ import annotations

import argparse
import gc
import heapq
import itertools
import json
import random
import statistics
import sys
import time
import tracemalloc
from array import array
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from bench.checks import first_problem, int_list, int_list_problem, range_problem, refusal
from workers.project_files import project_path

DEFAULT_ROUTING = project_path("config/routing.yaml")
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass(frozen=True, slots=True)
class SizeResult:
    workers: int
    decisions: int
    p50_us: float
    p90_us: float
    p99_us: float
    mean_us: float
    producer_p50_us: float
    cpu_p50_us: float          # thread CPU time of decide(): robust to a busy machine
    cpu_p99_us: float
    routed_p50_us: float       # thread CPU of engine.on_routed (the plugins' learning)
    collections_in_decide: int  # garbage collections that started inside a timed decide()
    completed: int = 0         # requests reported finished (``--complete``)
    held_incumbents: int = 0   # the most decode-guard incumbents on one worker at the end
    corrected: bool = False    # whether the estimator's online correction had learnt
    # collections that ran while the timed decisions did (inside decide or not), and the
    # thread CPU each took: what the collector costs the loop, wherever it lands
    young_collections: int = 0
    young_pause_p50_us: float = 0.0
    young_pause_max_us: float = 0.0
    older_collections: int = 0   # of generations 1 and 2
    older_pause_max_us: float = 0.0


def add_workload_arguments(parser: argparse.ArgumentParser, decisions: int,
                           warmup: int) -> None:
    """The options of ``time_decisions``' workload, shared with ``bench.decision_tail``."""
    parser.add_argument("--routing", type=Path, default=DEFAULT_ROUTING,
                        help="routing YAML to time (default config/routing.yaml)")
    parser.add_argument("--decisions", type=int, default=decisions,
                        help="timed decisions per fleet size (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=warmup,
                        help="untimed decisions first (default %(default)s)")
    parser.add_argument("--prompt-tokens", type=int, default=2048,
                        help="tokens per prompt, half a shared prefix and half a unique tail "
                             "(default %(default)s)")
    parser.add_argument("--prefixes", type=int, default=50,
                        help="distinct shared prefixes (half of each prompt)")
    parser.add_argument("--complete", action="store_true",
                        help="let each routed request finish after its estimated TTFT and "
                             "decode time (times a seeded error) and report it to "
                             "on_completed, as a router does (default: none finishes)")
    parser.add_argument("--observed-spread", type=float, default=0.25,
                        help="with --complete, the sigma of the log-normal error between the "
                             "estimated and the observed TTFT and TPOT (default %(default)s)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_workload_arguments(parser, decisions=2000, warmup=300)
    parser.add_argument("--workers", default="8,10,64,1000",
                        help="comma-separated fleet sizes (default 8,10,64,1000)")
    parser.add_argument("--index-blocks", type=int, default=200_000,
                        help="blocks inserted for the bytes-per-block measurement")
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the fleets' load, the prompts, the policy and the index "
                             "memory measurement (default %(default)s)")
    parser.add_argument("--no-gc-freeze", dest="gc_freeze", action="store_false",
                        help="leave start-up objects to the garbage collector (the router "
                             "freezes them once started, router/app.py)")
    parser.add_argument("--no-gc", dest="gc_enabled", action="store_false",
                        help="disable the garbage collector while the decisions run, to tell "
                             "its share of the tail from the decisions' own")
    parser.add_argument("--gc", dest="gc_mode", choices=("loop", "allocations"), default="loop",
                        help="when collections run: 'loop' (the router's default, "
                             "router/collector.py) runs the due one between decisions, "
                             "'allocations' leaves them to CPython, inside whatever allocates "
                             "(kvroute serve --gc-interval 0) (default %(default)s)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for decision.json and decision.png")


def workload_problem(args: argparse.Namespace) -> str | None:
    """The problem with ``add_workload_arguments``' options (shared with
    ``bench.decision_tail``), else None."""
    return first_problem(
        range_problem("--decisions", args.decisions, 1),
        range_problem("--warmup", args.warmup, 0),
        # half a shared prefix and half a unique tail, each of one token at least
        range_problem("--prompt-tokens", args.prompt_tokens, 2),
        range_problem("--prefixes", args.prefixes, 1),
        range_problem("--observed-spread", args.observed_spread, 0))


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    return first_problem(
        int_list_problem("--workers", args.workers, 1), workload_problem(args),
        # eight workers' indexes, a block each at least
        range_problem("--index-blocks", args.index_blocks, 8))


def run(args: argparse.Namespace) -> int:
    from policies.loader import load_routing

    refused = refusal("decision", args, check)
    if refused is not None:
        return refused
    sizes = int_list(args.workers)
    routing = load_routing(args.routing)
    results = []
    for size in sizes:
        print(f"[decision] {size} workers: {args.warmup} warm-up + {args.decisions} timed",
              file=sys.stderr, flush=True)
        results.append(time_decisions(routing, size, args))
    memory = index_memory(args.index_blocks, args.seed)
    floor = machine_floor(args.decisions)
    report = {
        "routing": str(args.routing), "prompt_tokens": args.prompt_tokens,
        "prefixes": args.prefixes, "decisions": args.decisions, "warmup": args.warmup,
        "complete": args.complete, "gc_enabled": args.gc_enabled,
        "gc_mode": args.gc_mode,
        "python": sys.version.split()[0],
        "sizes": [{name: getattr(r, name) for name in SizeResult.__slots__} for r in results],
        "memory": memory,
        "machine_floor": floor,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decision.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(results, args.out / "decision.png")
    print(markdown(results, memory))
    print(f"This machine's own tail: a fixed loop timed the same way took {floor['p50_us']:.0f} "
          f"µs at p50 and {floor['p99_us']:.0f} at p99 (p99 / p50 = "
          f"{floor['p99_over_p50']:.2f}).")
    return 0


def _fixed_work() -> float:
    """The same pure-Python arithmetic every call (no allocation that survives it)."""
    total = 0.0
    for i in range(2500):
        total += i * 0.5
    return total


def machine_floor(samples: int) -> dict[str, float]:
    """Thread CPU of a fixed loop, ``samples`` times after 200 warm-up calls: the tail this
    machine adds to any code path whatever it does (time slices, caches, frequency), to read
    the decisions' p99 against."""
    timings: list[float] = []
    for n in range(200 + max(1, samples)):
        started = time.thread_time_ns()
        _fixed_work()
        if n >= 200:
            timings.append((time.thread_time_ns() - started) / 1e3)
    ordered = sorted(timings)
    p50, p99 = _pct(ordered, 50), _pct(ordered, 99)
    return {"p50_us": p50, "p99_us": p99, "p99_over_p50": p99 / p50 if p50 > 0 else 0.0}


def synthetic_fleet(size: int) -> Any:
    from workers.engine.profiles import A100_80GB, BUILTIN_MODELS, H100_80GB, L40S_48GB
    from workers.fleet import FleetConfig, WorkerSpec
    from workers.models import WorkerInfo

    gpus = (H100_80GB, A100_80GB, A100_80GB, L40S_48GB, L40S_48GB)
    spec = BUILTIN_MODELS["llama-3.1-8b"]
    workers = []
    for i in range(size):
        gpu = gpus[i % len(gpus)]
        workers.append(WorkerSpec(WorkerInfo(
            id=f"w{i}", url=f"http://127.0.0.1:{9000 + i}", gpu=gpu, models=(MODEL,),
            model_spec=spec, price_per_hour=gpu.price_per_hour,
            labels=MappingProxyType({}))))
    return FleetConfig(gpu_classes=MappingProxyType({}),
                       models=MappingProxyType({MODEL: spec}), workers=tuple(workers))


def synthetic_views(fleet: Any, rng: random.Random) -> list[Any]:
    from workers.models import WorkerView

    views = []
    for spec in fleet.workers:
        running = rng.randint(0, 48)
        views.append(WorkerView(
            info=spec.info, running=running, waiting=rng.randint(0, 4),
            kv_usage=rng.uniform(0.05, 0.9), block_size=16,
            num_gpu_blocks=29_000 if spec.info.gpu.memory_gb >= 80 else 12_500,
            max_model_len=131_072, inflight_requests=running,
            inflight_tokens=rng.randint(0, 40_000), healthy=True, staleness_s=0.1,
            served_models=(MODEL,), inflight_prefill_tokens=rng.randint(0, 20_000)))
    return views


def time_decisions(routing: Any, size: int, args: argparse.Namespace,
                   record: list[float] | None = None) -> SizeResult:
    """Time ``args.decisions`` decisions at ``size`` workers; ``record`` (when given) gets
    each timed decision's thread CPU time in µs, in order."""
    from policies.base import RoutingRequest
    from policies.engine import PolicyEngine
    from router.collector import LoopCollector

    rng = random.Random(args.seed + size)
    fleet = synthetic_fleet(size)
    engine = PolicyEngine.build(routing, fleet, seed=args.seed)
    views = synthetic_views(fleet, rng)
    half = args.prompt_tokens // 2
    prefixes = [[rng.randrange(100_000) for _ in range(half)] for _ in range(args.prefixes)]
    timings: list[float] = []
    producer_timings: list[float] = []
    cpu_timings: list[float] = []
    routed_timings: list[float] = []
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    collections = [0]            # started so far
    in_decide = 0
    timing = [False]             # inside the timed decisions (after the warm-up)
    pause_started = [0]
    pauses: list[tuple[int, float]] = []    # (generation, thread CPU µs) while timing

    def count_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections[0] += 1
            pause_started[0] = time.thread_time_ns()
        elif timing[0]:
            pauses.append((info["generation"],
                           (time.thread_time_ns() - pause_started[0]) / 1e3))

    completions = Completions(args.seed + size, args.observed_spread) if args.complete else None
    # the router runs due collections from its event loop, between requests
    collector = LoopCollector() if getattr(args, "gc_mode", "allocations") == "loop" else None
    # (bench.decision_tail has no --gc: its runs leave collections to CPython, as before)
    if collector is not None:
        collector.install()
    gc.callbacks.append(count_collection)
    collecting = gc.isenabled()
    if not getattr(args, "gc_enabled", True):
        gc.disable()
    for n in range(args.warmup + args.decisions):
        timing[0] = n >= args.warmup
        tokens = array("i", rng.choice(prefixes) + [rng.randrange(100_000) for _ in range(half)])
        request = RoutingRequest(request_id=f"r{n}", model=MODEL, path="/v1/completions",
                                 prompt=tokens, max_tokens=rng.randint(16, 512),
                                 arrival_time=n * 0.01)
        if completions is not None:
            completions.report_until(engine, request.arrival_time)
        request.prompt_token_ids = tokens
        request.num_prompt_tokens = len(tokens)
        started = time.perf_counter_ns()
        for producer in engine.producers:
            if producer.name != "tokens":
                producer.produce(request, views)
        produced = time.perf_counter_ns()
        before = collections[0]
        cpu_started = time.thread_time_ns()
        decision = engine.decide(request, views)
        cpu_done = time.thread_time_ns()
        decided = time.perf_counter_ns()
        started_inside = collections[0] - before
        routed_started = time.thread_time_ns()
        engine.on_routed(request, decision)
        routed_done = time.thread_time_ns()
        if completions is not None:
            completions.add(request, decision)
        if collector is not None and gc.isenabled():
            collector.collect_due()
        if n >= args.warmup:
            in_decide += started_inside
            routed_timings.append((routed_done - routed_started) / 1e3)
            timings.append((decided - produced) / 1e3)
            cpu_timings.append((cpu_done - cpu_started) / 1e3)
            producer_timings.append((produced - started) / 1e3)
    gc.callbacks.remove(count_collection)
    if collector is not None:
        collector.uninstall()
    if collecting:
        gc.enable()
    if record is not None:
        record.extend(cpu_timings)
    ordered = sorted(timings)
    young = sorted(pause for generation, pause in pauses if generation == 0)
    older = [pause for generation, pause in pauses if generation > 0]
    return SizeResult(
        workers=size, decisions=len(timings), p50_us=_pct(ordered, 50),
        p90_us=_pct(ordered, 90), p99_us=_pct(ordered, 99), mean_us=statistics.fmean(ordered),
        producer_p50_us=_pct(sorted(producer_timings), 50),
        cpu_p50_us=_pct(sorted(cpu_timings), 50), cpu_p99_us=_pct(sorted(cpu_timings), 99),
        routed_p50_us=_pct(sorted(routed_timings), 50), collections_in_decide=in_decide,
        completed=completions.reported if completions is not None else 0,
        held_incumbents=held_incumbents(engine, fleet), corrected=corrected(engine),
        young_collections=len(young), young_pause_p50_us=_pct(young, 50),
        young_pause_max_us=young[-1] if young else 0.0, older_collections=len(older),
        older_pause_max_us=max(older, default=0.0))


class Completions:
    """Routed requests in order of their end, reported to ``on_completed`` once a later
    request arrives: the observed TTFT and TPOT are the chosen worker's estimates times
    ``exp(N(0, spread))`` (seeded), the output is ``max_tokens``."""

    def __init__(self, seed: int, spread: float) -> None:
        self._rng = random.Random(seed)
        self._spread = spread
        self._pending: list[tuple[float, int, Any, Any]] = []   # (end, order, request, outcome)
        self._order = itertools.count()     # ties in end time are reported in routing order
        self.reported = 0

    def add(self, request: Any, decision: Any) -> None:
        from policies.base import RequestOutcome

        ttft = decision.attributes.get("estimated_ttft_s")
        tpot = decision.attributes.get("estimated_tpot_s")
        if decision.worker_id is None or ttft is None or tpot is None:
            return
        ttft *= self._rng.lognormvariate(0.0, self._spread)
        tpot *= self._rng.lognormvariate(0.0, self._spread)
        output = request.max_tokens
        outcome = RequestOutcome(
            request_id=request.request_id, worker_id=decision.worker_id, status=200,
            prompt_tokens=request.num_prompt_tokens, completion_tokens=output, ttft_s=ttft,
            tpot_s=tpot, e2e_s=ttft + tpot * (output - 1))
        heapq.heappush(self._pending, (request.arrival_time + outcome.e2e_s,
                                       next(self._order), request, outcome))

    def report_until(self, engine: Any, now: float) -> None:
        """Report every request that ended by ``now``."""
        pending = self._pending
        while pending and pending[0][0] <= now:
            _, _, request, outcome = heapq.heappop(pending)
            engine.on_completed(request, outcome)
            self.reported += 1


def corrected(engine: Any) -> bool:
    """Whether some plugin's time estimator learnt a correction from completed requests."""
    return any(plugin.estimator.correction.has_learnt()
               for _, _, plugin in engine.plugins() if hasattr(plugin, "estimator"))


def held_incumbents(engine: Any, fleet: Any) -> int:
    """The most requests a plugin's decode guard holds on one worker (0 without a guard)."""
    most = 0
    for _, _, plugin in engine.plugins():
        guard = getattr(plugin, "guard", None)
        if guard is not None and hasattr(guard, "incumbents"):
            most = max([most, *(guard.incumbents(spec.info.id) for spec in fleet.workers)])
    return most


def index_memory(blocks: int, seed: int) -> dict[str, float]:
    """Bytes per indexed block of the approximate and the exact index: what each keeps, the
    int objects of its keys included. Hashes reach an index as ints made for them (a
    prompt's chain from the blocks producer, a KV event's from its decoder), so the blocks
    are kept as ``array('Q')`` and each batch becomes ints inside the measured window,
    where what the index does not keep is freed again."""
    from policies.prefix.approximate import ApproximatePrefixIndex
    from workers.engine.api import BlockStored
    from workers.kv_events.exact_index import ExactPrefixIndex

    rng = random.Random(seed)
    workers = 8
    per_worker = blocks // workers
    chunks = [array("Q", [rng.getrandbits(64) for _ in range(per_worker)])
              for _ in range(workers)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    approximate = ApproximatePrefixIndex(default_capacity_blocks=per_worker)
    for w, chunk in enumerate(chunks):
        for start in range(0, len(chunk), 64):
            approximate.insert(f"w{w}", chunk[start:start + 64])     # as the producer gives
    approximate_bytes = tracemalloc.get_traced_memory()[0] - before
    before = tracemalloc.get_traced_memory()[0]
    exact = ExactPrefixIndex()
    for w, chunk in enumerate(chunks):
        exact.apply_events(f"w{w}", [BlockStored(block_hashes=tuple(chunk),
                                                 parent_block_hash=None, token_ids=(),
                                                 block_size=16)])
    exact_bytes = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    indexed = approximate.total_blocks()
    return {"blocks": float(indexed),
            "approximate_bytes_per_block": approximate_bytes / indexed,
            "exact_bytes_per_block": exact_bytes / indexed}


def _pct(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def markdown(results: list[SizeResult], memory: dict[str, float]) -> str:
    lines = ["| workers | decisions | wall p50 µs | wall p99 µs | CPU p50 µs | CPU p99 µs "
             "| blocks producer p50 µs | on_routed CPU p50 µs | young collections (p50 / max µs) "
             "| older collections (max µs) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.workers} | {r.decisions} | {r.p50_us:.0f} | {r.p99_us:.0f} | "
                     f"{r.cpu_p50_us:.0f} | {r.cpu_p99_us:.0f} | {r.producer_p50_us:.0f} | "
                     f"{r.routed_p50_us:.0f} | {r.young_collections} "
                     f"({r.young_pause_p50_us:.0f} / {r.young_pause_max_us:.0f}) | "
                     f"{r.older_collections} ({r.older_pause_max_us:.0f}) |")
    lines.append("")
    lines.append(f"Prefix index memory ({memory['blocks']:.0f} blocks over 8 workers): "
                 f"approximate {memory['approximate_bytes_per_block']:.0f} B/block, "
                 f"exact (KV events) {memory['exact_bytes_per_block']:.0f} B/block.")
    return "\n".join(lines)


def plot(results: list[SizeResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r.workers for r in results]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(sizes, [r.p50_us for r in results], marker="o", label="p50")
    ax.plot(sizes, [r.p99_us for r in results], marker="o", label="p99")
    ax.plot(sizes, [r.cpu_p50_us for r in results], marker="s", linestyle="--",
            label="CPU p50")
    ax.plot(sizes, [r.cpu_p99_us for r in results], marker="s", linestyle="--",
            label="CPU p99")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("workers")
    ax.set_ylabel("decision time (µs)")
    ax.set_title("PolicyEngine.decide time by fleet size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decision", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
