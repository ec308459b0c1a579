"""One ``kvroute sim`` invocation: check the inputs, run every policy, write the report.

Inputs are checked up front (trace readable, fleet valid, every policy name resolvable) so a
typo fails in a second with a clear message instead of after an hour of simulation. Policies
run one after another, or ``jobs`` at a time in forked processes; a progress bar on stderr
counts simulated requests across all of them.
"""

from __future__ import annotations

import multiprocessing
import queue
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sim.cache_curve import prefix_ceiling
from sim.cli import first_problem, out_problem
from sim.client_max_tokens import EXACT, ClientMaxTokens, window_problem
from sim.policy_names import UnknownPolicyError, policy_label, resolve_policy
from sim.report import (
    output_clash,
    remove_stale_requests_csvs,
    write_plots,
    write_requests_csv,
    write_summary,
)
from sim.runner import (
    PolicyJob,
    PolicyRun,
    fleet_meta,
    load_job_trace,
    run_policy,
    trace_meta,
)
from sim.semantic_policies import text_notes, train_ahead
from sim.simulator import (
    SimulationSettings,
    fleet_kv_tokens,
    largest_window,
    router_scrape_interval,
    servable,
    simulated_model,
)
from sim.slo import DEFAULT_SLO, Slo
from sim.traces import Trace, TraceError, TraceFormat
from workers.fleet import FleetConfig, FleetConfigError, load_fleet

_PROGRESS_BATCH = 100
# how long an interrupted run waits for its pool's thread to see the workers it killed
MANAGER_JOIN_S = 5.0


@dataclass(frozen=True, slots=True)
class SimulationRequest:
    trace: str
    fleet: str
    policies: tuple[str, ...]
    out: str
    trace_format: TraceFormat = "auto"
    rate_scale: float = 1.0
    goodput: bool = False
    limit: int | None = None
    duration_s: float | None = None
    skip: int = 0
    seed: int = 0
    scrape_interval_s: float | None = None
    jobs: int = 1
    jitter_s: float = 0.0
    kv_events: bool = False
    client_max_tokens: ClientMaxTokens = EXACT
    slo: Slo = DEFAULT_SLO


def run_session(request: SimulationRequest) -> int:
    from policies.engine import check_against_fleet
    from policies.errors import RoutingConfigError

    try:
        fleet = load_fleet(request.fleet)
        kv_tokens = fleet_kv_tokens(fleet)       # every worker has room for a KV cache
        for name in request.policies:
            try:       # and its rules' models and pools are the fleet's (not after a run)
                check_against_fleet(resolve_policy(name), fleet)
            except RoutingConfigError as exc:      # say which of the policies it is
                text = str(exc)
                raise RoutingConfigError(text if text.startswith(name)
                                         else f"{name}: {text}") from None
        interval = request.scrape_interval_s or router_scrape_interval()
        template = PolicyJob(
            policy="", trace_path=request.trace, fleet_path=request.fleet,
            trace_format=request.trace_format, skip=request.skip, limit=request.limit,
            duration_s=request.duration_s, rate_scale=request.rate_scale, seed=request.seed,
            scrape_interval_s=interval, goodput=request.goodput, jitter_s=request.jitter_s,
            kv_events=request.kv_events, client_max_tokens=request.client_max_tokens,
            slo=request.slo)
        trace = load_job_trace(template)
    except (TraceError, FleetConfigError, RoutingConfigError, UnknownPolicyError) as exc:
        print(f"kvroute sim: {exc}", file=sys.stderr)
        return 2
    if not trace.requests:
        print(f"kvroute sim: {request.trace}: no requests after slicing", file=sys.stderr)
        return 2
    problem = first_problem(scrape_count_problem(trace.span_s / request.rate_scale, interval),
                            model_problem(fleet),
                            window_problem(request.client_max_tokens, largest_window(fleet)))
    if problem:
        print(f"kvroute sim: {problem}", file=sys.stderr)
        return 2
    note = model_note(fleet, rewriting_rules(request.policies))
    if note:
        print(f"kvroute sim: note: {note}", file=sys.stderr)
    unlikely = unlikely_rate(trace)
    if unlikely:
        print(f"kvroute sim: note: {request.trace}: {unlikely}", file=sys.stderr)
    problem = out_problem(request.out) or output_clash(Path(request.out))   # before the run
    if problem:
        print(f"kvroute sim: {problem}", file=sys.stderr)
        return 2
    for semantic_note in text_notes(request.policies, trace):
        print(f"kvroute sim: note: {semantic_note}", file=sys.stderr)
    try:
        train_ahead(request.policies)
    except RoutingConfigError as exc:
        print(f"kvroute sim: {exc}", file=sys.stderr)
        return 2
    served = servable(trace, fleet)       # the ceilings leave out what no worker can serve
    ceiling = prefix_ceiling(served)
    pooled = prefix_ceiling(served, capacity_tokens=kv_tokens) if ceiling else 0.0
    jobs = [replace(template, policy=name) for name in request.policies]
    runs = _run_all(jobs, trace, request.jobs, ceiling)
    out = Path(request.out)
    entries = {policy_label(run.policy): run.summary for run in runs}
    meta = {"trace": trace_meta(template, trace, ceiling, pooled), "fleet": fleet_meta(fleet),
            "settings": {"scrape_interval_s": interval, "seed": request.seed,
                         "hash_algo": SimulationSettings().hash_algo,
                         "kv_events": request.kv_events,
                         "client_max_tokens": request.client_max_tokens.label()},
            "slo": request.slo.as_json()}
    remove_stale_requests_csvs(out, entries)
    for run in runs:
        write_requests_csv(out / "requests" / f"{policy_label(run.policy)}.csv", run.records)
    write_plots(out, entries, {policy_label(r.policy): r.ttfts for r in runs},
                request.slo.attainment)
    # last, so that a summary.json (what scorecard --judge-only reads) means a whole run
    path = write_summary(out, meta, entries)
    print((out / "summary.md").read_text(), end="")
    print(f"wrote {path} and plots in {out}", file=sys.stderr)
    return 0


# the most scrape rounds one simulation may step through: each costs tens of microseconds even
# with the fleet idle, so 20 million are minutes (a --rate-scale of 1e-300 never ended)
MAX_SCRAPE_ROUNDS = 20_000_000


def scrape_count_problem(span_s: float, interval_s: float) -> str | None:
    """Why a run of ``span_s`` simulated seconds, scraped every ``interval_s``, would not end
    in reasonable time; None when it would."""
    rounds = span_s / interval_s
    if rounds <= MAX_SCRAPE_ROUNDS:
        return None
    return (f"the trace lasts {_count(span_s)} simulated seconds at this --rate-scale: "
            f"{_count(rounds)} scrapes every {interval_s:g} s, more than the "
            f"{MAX_SCRAPE_ROUNDS:,} a run steps through in minutes: raise --rate-scale or "
            "--scrape-interval, or cut the trace with --duration")


def _count(value: float) -> str:
    return f"{value:,.0f}" if value < 1e12 else f"{value:.2e}"


def model_problem(fleet: FleetConfig) -> str | None:
    """A fleet whose simulated model (the first worker's first) serves embeddings only: the
    simulation replays generations, which the router would refuse (400) there."""
    model = simulated_model(fleet)
    runners = {w.info.model_spec.runner for w in fleet.workers if model in w.info.models}
    if runners and "generate" not in runners:
        return (f"{fleet.source}: every simulated request asks for the first worker's model, "
                f"{model}, which runs as {'/'.join(sorted(runners))} (embeddings): put a "
                "worker of a generative model first")
    return None


def model_note(fleet: FleetConfig, rewriting: Sequence[str] = ()) -> str | None:
    """Which workers a simulation of a fleet of several models uses (those serving the first
    worker's first model, and the models the ``rewriting`` policies' rules send requests
    to); the others stay idle, though counted in the fleet's cost."""
    model = simulated_model(fleet)
    models = {m for w in fleet.workers for m in w.info.models}
    if len(models) <= 1:
        return None
    serving = sum(model in w.info.models for w in fleet.workers)
    rules = (f", unless a rule of {', '.join(rewriting)} sends it to another model"
             if rewriting else "")
    return (f"{fleet.source} serves {len(models)} models; every simulated request asks for "
            f"the first worker's, {model}, served by {serving} of its {len(fleet.workers)} "
            f"workers{rules}: the others stay idle, and count in $/Mtok fleet")


def rewriting_rules(policies: Sequence[str]) -> list[str]:
    """The policies whose rules rewrite the model of some requests."""
    return [name for name in policies
            if any(rule.then.model is not None for rule in resolve_policy(name).rules)]


def unlikely_rate(trace: Trace) -> str | None:
    """A note when the arrivals look read in the wrong unit (Mooncake timestamps are
    milliseconds, generic ``arrival_s`` seconds): 20 or more requests faster than 1,000 a
    second or slower than one in 10 minutes on average. Such a trace still runs."""
    count, span = len(trace.requests), trace.span_s
    if count < 20:
        return None
    if span <= 0 or count / span > 1000:
        return (f"{count} requests arrive within {span:.3f} s: are its times in the unit "
                "its format says (Mooncake: milliseconds; generic JSONL: seconds)?")
    if span / count > 600:
        return (f"{count} requests arrive over {span:,.0f} s (one every {span / count:,.0f} "
                "s): are its times in the unit its format says (Mooncake: milliseconds; "
                "generic JSONL: seconds)?")
    return None


def _run_all(jobs: Sequence[PolicyJob], trace: Trace, parallel: int,
             ceiling: float) -> list[PolicyRun]:
    """Run every job (their trace is ``trace``, loaded once here; each process of a parallel
    run reads it again)."""
    per_run = len(trace.requests)
    from tqdm import tqdm

    bar = tqdm(total=per_run * len(jobs), unit="req", file=sys.stderr, desc="simulating",
               dynamic_ncols=True, mininterval=1.0)
    try:
        if parallel <= 1 or len(jobs) <= 1:
            def progress(kind: str, n: int) -> None:
                _apply(bar, kind, n)
            return [run_policy(job, progress, ceiling, trace) for job in jobs]
        return _run_parallel(jobs, parallel, ceiling, bar)
    finally:
        bar.close()


def _apply(bar: Any, kind: str, n: int) -> None:
    if kind == "total":
        bar.total += n
        bar.refresh()
    else:
        bar.update(n)


def _run_parallel(jobs: Sequence[PolicyJob], parallel: int, ceiling: float,
                  bar: Any) -> list[PolicyRun]:
    context = multiprocessing.get_context("fork")
    others = set(multiprocessing.active_children())    # not ours to stop
    manager = context.Manager()
    pool = ProcessPoolExecutor(max_workers=min(parallel, len(jobs)), mp_context=context)
    try:
        updates: Any = manager.Queue()
        futures: list[Future[PolicyRun]] = [
            pool.submit(_child_run, job, ceiling, updates) for job in jobs]
        while not all(f.done() for f in futures):
            _drain(updates, bar, timeout=0.2)
        _drain(updates, bar, timeout=0.0)
        results = [f.result() for f in futures]
    except BaseException:
        # Ctrl-C (or SIGTERM, which the CLI turns into it): stop now. Leaving the pool's
        # with-block ran every queued policy first, and a second Ctrl-C in that wait could
        # hang the exit; workers left behind ran on after a SIGTERM.
        for child in set(multiprocessing.active_children()) - others:   # the pool, the manager
            child.kill()      # their work is lost anyway; a SIGTERM would print tracebacks
        # the pool's own thread, seeing its workers gone, closes its wake-up pipe; left
        # running, it raced the exit's wake-up call to that pipe (CPython 3.11), whose
        # OSError (Bad file descriptor) was printed after "interrupted" (taken before the
        # shutdown, which forgets it)
        manager_thread = getattr(pool, "_executor_manager_thread", None)
        pool.shutdown(wait=False, cancel_futures=True)
        if isinstance(manager_thread, threading.Thread):
            manager_thread.join(timeout=MANAGER_JOIN_S)
        raise
    pool.shutdown()
    manager.shutdown()
    return results


def _drain(updates: Any, bar: Any, timeout: float) -> None:
    try:
        kind, n = updates.get(timeout=timeout) if timeout else updates.get_nowait()
        _apply(bar, kind, n)
        while True:
            kind, n = updates.get_nowait()
            _apply(bar, kind, n)
    except queue.Empty:
        return


def _child_run(job: PolicyJob, ceiling: float, updates: Any) -> PolicyRun:
    """Runs in a pool process; reports progress through the manager queue ``updates``."""
    pending = [0]

    def progress(kind: str, n: int) -> None:
        if kind == "total":
            updates.put((kind, n))
            return
        pending[0] += n
        if pending[0] >= _PROGRESS_BATCH:
            updates.put(("done", pending[0]))
            pending[0] = 0

    run = run_policy(job, progress, ceiling)
    if pending[0]:
        updates.put(("done", pending[0]))
    return run
