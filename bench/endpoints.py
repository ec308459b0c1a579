"""What the router adds to each endpoint it serves: the same request through kvroute and
straight to the worker kvroute chose, one after the other.

This starts ``kvroute up`` on a fleet of emulated workers answering at once (``--time-scale
0``; default ``config/examples/embeddings-fleet.yaml``, which serves chat, the Responses and
Messages APIs and embeddings), each on a free loopback port; all are stopped at the end. For
each case it sends ``--warmup`` requests, then ``--repeat`` pairs, one request through the
router, then the same one to the worker named in its ``x-kvroute-worker`` header, and times
each whole answer on the client. The difference of the medians is what the router adds, on
this machine, with everything sharing its cores. Cases (``--cases``):

* ``chat``: a short chat completion, one output token;
* ``embeddings``: one short input;
* ``tokenize``: ``POST /tokenize`` (no routing decision);
* ``responses``: a new Responses API turn, one output token;
* ``responses-follow-up``: a turn continuing one response (``previous_response_id``): through
  the router, its owner is looked up and the decision is taken on that worker alone;
* ``messages``: an Anthropic Messages API turn, one output token;
* ``rerank``: ``POST /rerank``, a query against three documents, the best two back;
* ``score``: ``POST /score``, one text against three.

Prints a Markdown table and writes ``endpoints.json`` to ``--out``.

    python -m bench.endpoints --out out/endpoints
    kvroute bench endpoints --repeat 500 --cases chat,embeddings --out out/endpoints
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.cases import chosen_cases
from bench.checks import first_problem, range_problem, refusal, refuse
from bench.launch import (
    KvrouteUp,
    LaunchError,
    emulated_fleet,
    emulated_fleet_on_free_ports,
    wait_all_workers_healthy,
)
from workers.project_files import project_path

DEFAULT_FLEET = project_path("config/examples/embeddings-fleet.yaml")
TEXT = "Where is my parcel? It was due on Monday."
DOCUMENTS = ["Orders ship within two days.", "Reset your password from the sign-in page.",
             "Track a parcel with the number in your confirmation e-mail."]


@dataclass(frozen=True, slots=True)
class Case:
    key: str
    path: str
    runner: str                                     # the workers it needs: generate | pooling
    body: Callable[[str, str | None], dict[str, Any]]   # (model, response to continue)


CASES = (
    Case("chat", "/v1/chat/completions", "generate",
         lambda model, _: {"model": model, "max_tokens": 1,
                           "messages": [{"role": "user", "content": TEXT}]}),
    Case("embeddings", "/v1/embeddings", "pooling",
         lambda model, _: {"model": model, "input": TEXT}),
    Case("tokenize", "/tokenize", "generate", lambda model, _: {"model": model, "prompt": TEXT}),
    Case("responses", "/v1/responses", "generate",
         lambda model, _: {"model": model, "input": TEXT, "max_output_tokens": 1}),
    Case("responses-follow-up", "/v1/responses", "generate",
         lambda model, previous: {"model": model, "input": "And then?", "max_output_tokens": 1,
                                  "previous_response_id": previous}),
    Case("messages", "/v1/messages", "generate",
         lambda model, _: {"model": model, "max_tokens": 1,
                           "messages": [{"role": "user", "content": TEXT}]}),
    Case("rerank", "/rerank", "pooling",
         lambda model, _: {"model": model, "query": TEXT, "documents": DOCUMENTS, "top_n": 2}),
    Case("score", "/score", "pooling",
         lambda model, _: {"model": model, "text_1": TEXT, "text_2": DOCUMENTS}),
)


@dataclass(frozen=True, slots=True)
class CaseResult:
    key: str
    model: str
    statuses: list[int]
    direct_ms: list[float]
    routed_ms: list[float]

    @property
    def added_ms(self) -> float:
        return statistics.median(self.routed_ms) - statistics.median(self.direct_ms)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fleet", type=Path, default=DEFAULT_FLEET,
                        help="fleet file of emulated workers, one model per runner at least; "
                             "their ports are replaced by free ones (default %(default)s)")
    parser.add_argument("--routing", type=Path, default=project_path("config/routing.yaml"),
                        help="routing file (default config/routing.yaml)")
    parser.add_argument("--cases", default=",".join(c.key for c in CASES),
                        help="comma-separated cases, in order (default: all: %(default)s)")
    parser.add_argument("--repeat", type=int, default=300,
                        help="timed pairs per case (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=30,
                        help="untimed pairs per case first (default %(default)s)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for endpoints.json")


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    try:
        chosen_cases(str(args.cases), CASES)
    except ValueError as exc:
        return f"--cases: {exc}"
    problem = first_problem(range_problem("--repeat", args.repeat, 1),
                            range_problem("--warmup", args.warmup, 0))
    if problem:
        return problem
    try:
        models = models_by_runner(emulated_fleet(args.fleet))
    except ValueError as exc:
        return str(exc)
    missing = sorted({case.runner for case in chosen_cases(str(args.cases), CASES)}
                     - set(models))
    if missing:
        return (f"{args.fleet}: no model declared with runner {', '.join(missing)} for the "
                "cases asked")
    return None


def run(args: argparse.Namespace) -> int:
    refused = refusal("endpoints", args, check)
    if refused is not None:
        return refused
    cases = chosen_cases(str(args.cases), CASES)
    with tempfile.TemporaryDirectory(prefix="kvroute-endpoints-") as tmp:
        try:
            fleet_path, fleet = emulated_fleet_on_free_ports(args.fleet, Path(tmp))
        except ValueError as exc:           # (changed since check read it)
            return _refuse(str(exc))
        models = models_by_runner(fleet)
        urls = {w["id"]: f"http://127.0.0.1:{w['emulate']['port']}" for w in fleet["workers"]}
        try:
            with KvrouteUp(fleet_path, args.routing, Path(tmp), "--time-scale", "0") as router:
                results = asyncio.run(_measure_all(
                    router.base_url, urls, models, cases, args.repeat,
                    args.warmup))
        except LaunchError as exc:
            print(f"kvroute bench endpoints: {exc}", file=sys.stderr)
            return 1
    report = {"fleet": str(args.fleet), "routing": str(args.routing), "repeat": args.repeat,
              "warmup": args.warmup,
              "cases": [{**asdict(r), "added_ms": r.added_ms} for r in results]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "endpoints.json").write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(results))
    return 0


def _refuse(message: str) -> int:
    return refuse("endpoints", message)


def models_by_runner(fleet: dict[str, Any]) -> dict[str, str]:
    """The first served model of each runner (``generate`` unless declared, or its arch's)."""
    from workers.fleet import parse_fleet

    parsed = parse_fleet(fleet)
    models: dict[str, str] = {}
    for worker in parsed.workers:
        models.setdefault(worker.info.model_spec.runner, worker.info.models[0])
    return models


async def _measure_all(base_url: str, urls: dict[str, str], models: dict[str, str],
                       cases: list[Case], repeat: int, warmup: int) -> list[CaseResult]:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        await wait_all_workers_healthy(session, base_url)
        return [await _measure(session, base_url, urls, models[case.runner], case, repeat,
                               warmup) for case in cases]


async def _measure(session: Any, base_url: str, urls: dict[str, str], model: str, case: Case,
                   repeat: int, warmup: int) -> CaseResult:
    previous = None
    if case.key == "responses-follow-up":      # one response, continued again and again
        _, _, answer, _ = await _send(session, base_url + case.path,
                                      CASES[3].body(model, None))
        previous = answer["id"]
    body = case.body(model, previous)
    statuses: list[int] = []
    direct_ms: list[float] = []
    routed_ms: list[float] = []
    for i in range(warmup + repeat):
        routed, status, _, worker = await _send(session, base_url + case.path, body)
        direct, direct_status, _, _ = await _send(session, urls[worker] + case.path, body)
        if i >= warmup:
            statuses += [status, direct_status]
            routed_ms.append(routed)
            direct_ms.append(direct)
    return CaseResult(case.key, model, sorted(set(statuses)), direct_ms, routed_ms)


async def _send(session: Any, url: str, body: dict[str, Any]
                ) -> tuple[float, int, Any, str]:
    """(ms to the whole answer, status, JSON body, the x-kvroute-worker header or "")."""
    started = time.perf_counter()
    async with session.post(url, json=body) as resp:
        answer = await resp.json(content_type=None)
        elapsed = (time.perf_counter() - started) * 1e3
        if resp.status != 200:
            raise LaunchError(f"{url}: {resp.status} {str(answer)[:300]}")
        return elapsed, resp.status, answer, resp.headers.get("x-kvroute-worker", "")


def markdown(results: list[CaseResult]) -> str:
    lines = ["| case | model | direct ms (p50 / p90) | through kvroute ms (p50 / p90) | "
             "kvroute adds (p50, ms) |", "|---|---|--:|--:|--:|"]
    for r in results:
        lines.append(f"| {r.key} | {r.model} | {_p50_p90(r.direct_ms)} | "
                     f"{_p50_p90(r.routed_ms)} | {r.added_ms:.2f} |")
    return "\n".join(lines)


def _p50_p90(samples: list[float]) -> str:
    ordered = sorted(samples)
    return f"{statistics.median(ordered):.2f} / {ordered[int(0.9 * (len(ordered) - 1))]:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.endpoints", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
