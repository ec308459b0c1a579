"""CPU per request of the proxy's hop to a worker: aiohttp's ClientSession against
``workers.upstream.UpstreamClient``, the client the proxy uses.

A local aiohttp server in its own process (the emulator's server stack) answers a POST with
a 190-byte JSON body, or with an 18-event SSE stream written event by event. In this process
each client sends ``--requests`` requests from ``--concurrency`` concurrent tasks, reading
every answer whole (streams chunk by chunk, as the proxy relays them), in alternating rounds
(``--rounds``). The client process's CPU time (``time.process_time``) per request is the
client's own cost: the server's is in the other process. Pin the two apart for steady
numbers (``--client-cpu`` / ``--server-cpu``, default 1 and 0). ``--tls`` adds
``UpstreamClient`` over TLS (``upstream-tls``): a second server process with a certificate
from a throwaway CA (``trustme``, a dev dependency), reached over keep-alive connections as
an ``https://`` worker is.

Writes ``upstream.json`` to ``--out`` and prints a Markdown table.

    python -m bench.upstream --out out/upstream
    kvroute bench upstream --rounds 3 --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.checks import cpu_list, cpu_list_problem, first_problem, range_problem, refusal
from bench.launch import checkout_env, python_module

BODY = (b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":'
        b'"assistant","content":"hello world"}}],"usage":{"prompt_tokens":10,'
        b'"completion_tokens":2,"total_tokens":12}}')
EVENT = (b'data: {"id":"cmpl-1","object":"chat.completion.chunk","choices":[{"index":0,'
         b'"delta":{"content":"tok"}}]}\n\n')
STREAM_EVENTS = 17          # then [DONE]: 18 events, as the overhead race's streams
CLIENTS = ("aiohttp", "upstream")
TLS_CLIENT = "upstream-tls"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=3000,
                        help="requests per client, kind and round (default 3000)")
    parser.add_argument("--concurrency", type=int, default=32,
                        help="concurrent tasks sending each client's requests "
                             "(default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--client-cpu", default="1", help="CPU list for this process")
    parser.add_argument("--server-cpu", default="0", help="CPU list for the server")
    parser.add_argument("--tls", action="store_true",
                        help="also measure UpstreamClient over TLS (needs trustme)")
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve-tls", nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="folder for upstream.json (required)")


def check(args: argparse.Namespace) -> str | None:
    """The first problem with the options, else None (``bench.checks``)."""
    if args.serve is not None:          # this module's own server process
        return None
    if args.out is None:
        return "--out DIR is required"
    problem = first_problem(
        range_problem("--concurrency", args.concurrency, 1),
        range_problem("--rounds", args.rounds, 1),
        cpu_list_problem("--client-cpu", args.client_cpu, empty=True),
        cpu_list_problem("--server-cpu", args.server_cpu, empty=True))
    if problem:
        return problem
    if args.requests < args.concurrency:    # each task sends --requests // --concurrency
        return (f"--requests: must be >= --concurrency ({args.concurrency}), "
                f"got {args.requests}")
    if args.tls:
        try:
            import trustme  # noqa: F401
        except ModuleNotFoundError:
            return "--tls needs trustme (pip install -e '.[dev]')"
    return None


def run(args: argparse.Namespace) -> int:
    if args.serve is not None:
        _serve(args.serve, args.serve_tls)
        return 0
    refused = refusal("upstream", args, check)
    if refused is not None:
        return refused
    import uvloop

    report = uvloop.run(_measure(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "upstream.json").write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report))
    return 0


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp

    from bench.launch import pinned
    from workers.ports import free_port
    from workers.upstream import UpstreamClient

    _pin(args.client_cpu)
    port = free_port()
    servers = [subprocess.Popen(
        pinned([*python_module("bench.upstream"), "--serve", str(port)],
               args.server_cpu or None), stdout=subprocess.DEVNULL, env=checkout_env())]
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                    auto_decompress=False)
    upstream = UpstreamClient(connect_timeout_s=5.0, read_timeout_s=30.0)
    base = f"http://127.0.0.1:{port}/v1/chat/completions"
    headers = {"Content-Type": "application/json"}
    names = list(CLIENTS)
    tls_client: UpstreamClient | None = None
    tls_base = ""
    folder = tempfile.TemporaryDirectory()
    if args.tls:
        tls_port = free_port()
        certfile, keyfile, verifying = _tls_files(Path(folder.name))
        servers.append(subprocess.Popen(
            pinned([*python_module("bench.upstream"), "--serve", str(tls_port),
                    "--serve-tls", str(certfile), str(keyfile)], args.server_cpu or None),
            stdout=subprocess.DEVNULL, env=checkout_env()))
        tls_client = UpstreamClient(connect_timeout_s=5.0, read_timeout_s=30.0,
                                    tls={f"https://127.0.0.1:{tls_port}": verifying})
        tls_base = f"https://127.0.0.1:{tls_port}/v1/chat/completions"
        names.append(TLS_CLIENT)

    async def with_upstream_tls(url: str) -> None:
        assert tls_client is not None
        response = await tls_client.post(url.replace(base, tls_base), b"{}", headers)
        async for _ in response.chunks():
            pass
        response.close()

    async def with_aiohttp(url: str) -> None:
        response = await session.post(url, data=b"{}", headers=headers)
        async for _ in response.content.iter_any():
            pass
        response.close()

    async def with_upstream(url: str) -> None:
        response = await upstream.post(url, b"{}", headers)
        async for _ in response.chunks():
            pass
        response.close()

    clients: dict[str, Callable[[str], Awaitable[None]]] = {
        "aiohttp": with_aiohttp, "upstream": with_upstream, TLS_CLIENT: with_upstream_tls}
    samples: dict[str, list[float]] = {f"{c}-{k}": [] for c in names
                                       for k in ("whole", "stream")}
    try:
        for name in names:
            await _wait_ready(clients[name], base)
        for round_number in range(args.rounds):
            for kind, url in (("whole", base), ("stream", base + "?stream=1")):
                for name in names:
                    cpu_us = await _round(clients[name], url, args.requests, args.concurrency)
                    samples[f"{name}-{kind}"].append(cpu_us)
                    print(f"[upstream] round {round_number + 1}/{args.rounds} {kind} {name}: "
                          f"{cpu_us:.0f} µs CPU per request", file=sys.stderr, flush=True)
    finally:
        await session.close()
        await upstream.close()
        if tls_client is not None:
            await tls_client.close()
        for server in servers:
            server.terminate()
            server.wait(10)
        folder.cleanup()
    return {"requests": args.requests, "concurrency": args.concurrency,
            "rounds": args.rounds, "stream_events": STREAM_EVENTS + 1,
            "client_cpu_us_per_request": samples,
            "median_us": {key: statistics.median(values) for key, values in samples.items()},
            "python": sys.version.split()[0]}


async def _round(send: Callable[[str], Awaitable[None]], url: str, requests: int,
                 concurrency: int) -> float:
    per_task = max(1, requests // concurrency)

    async def task(count: int) -> None:
        for _ in range(count):
            await send(url)

    await asyncio.gather(*(task(2) for _ in range(concurrency)))     # warm the pools
    started = time.process_time()
    await asyncio.gather(*(task(per_task) for _ in range(concurrency)))
    return (time.process_time() - started) / (per_task * concurrency) * 1e6


async def _wait_ready(send: Callable[[str], Awaitable[None]], url: str) -> None:
    deadline = time.monotonic() + 20.0
    while True:
        try:
            await send(url)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


def _tls_files(folder: Path) -> tuple[Path, Path, ssl.SSLContext]:
    """A certificate for 127.0.0.1 from a throwaway CA, and a context trusting that CA."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    certfile, keyfile = folder / "cert.pem", folder / "key.pem"
    certfile.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(keyfile))
    verifying = ssl.create_default_context()
    ca.configure_trust(verifying)
    return certfile, keyfile, verifying


def _serve(port: int, tls_files: list[str] | None = None) -> None:
    import uvloop
    from aiohttp import web

    from workers.tls import server_tls_context

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        if "stream" not in request.query:
            return web.Response(body=BODY, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(STREAM_EVENTS):
            await response.write(EVENT)
            await asyncio.sleep(0)          # one write per event, as a worker streams
        await response.write(b"data: [DONE]\n\n")
        return response

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        tls = server_tls_context(*tls_files) if tls_files else None
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls).start()
        await asyncio.Event().wait()

    uvloop.run(main())


def _pin(cpus: str) -> None:
    if not cpus:
        return
    with contextlib.suppress(OSError, ValueError):      # fewer CPUs than asked: unpinned
        os.sched_setaffinity(0, set(cpu_list(cpus)))


def markdown(report: dict[str, Any]) -> str:
    samples = report["client_cpu_us_per_request"]
    tls = f"{TLS_CLIENT}-whole" in samples
    lines = ["| answer | aiohttp ClientSession µs | UpstreamClient µs | saved |"
             + (" UpstreamClient over TLS µs |" if tls else ""),
             "|---|---|---|---|" + ("---|" if tls else "")]
    for kind, label in (("whole", "JSON, read whole"),
                        ("stream", f"SSE, {report['stream_events']} events")):
        old, new = samples[f"aiohttp-{kind}"], samples[f"upstream-{kind}"]
        old_median, new_median = statistics.median(old), statistics.median(new)
        line = (f"| {label} | {_spread(old)} | {_spread(new)} "
                f"| {1 - new_median / old_median:.0%} |")
        if tls:
            line += f" {_spread(samples[f'{TLS_CLIENT}-{kind}'])} |"
        lines.append(line)
    return "\n".join(lines)


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}–{max(values):.0f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.upstream",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
