"""Host one or more emulated workers in one event loop, one listening port each.

Workers share the tokenizer (read-only) and nothing else. The ``refuse_connections`` faults
are applied here, since they are about the listening socket: a worker configured to refuse
never listens, and ``refuse_after_s``/``refuse_for_s`` close its socket for a window.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aiohttp import web

from workers.emulator import PARENT_PID_ENV
from workers.emulator.app import create_app
from workers.emulator.config import EmulatorConfig
from workers.emulator.tokens import Tokenizer
from workers.task_cancel import cancel_and_wait
from workers.tls import server_tls_context
from workers.upstream import host_port

READY_LINE = "emulator ready"
PARENT_CHECK_S = 0.5          # how often an emulator started as a child looks for its parent


@dataclass(slots=True)
class HostedWorker:
    config: EmulatorConfig
    runner: web.AppRunner
    site: web.TCPSite | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def listen(self) -> None:
        """Listen on the worker's address; ``OSError`` naming the worker and its address
        when it cannot (the port taken: by one of several workers of a fleet, which)."""
        if self.site is None:
            config = self.config
            tls = None
            if config.ssl_certfile is not None:
                tls = server_tls_context(config.ssl_certfile, config.ssl_keyfile)
            site = web.TCPSite(self.runner, config.host, config.port,
                               reuse_address=True, ssl_context=tls)
            try:
                await site.start()
            except OSError as exc:
                # (a resolver's error has a negative errno, which strerror cannot name)
                why = (os.strerror(exc.errno) if exc.errno and exc.errno > 0
                       else exc.strerror or str(exc))
                raise OSError(f"worker {config.worker_id!r} at "
                              f"{host_port(config.host, config.port)}: {why}") from None
            self.site = site

    async def refuse(self) -> None:
        """Close the listening socket and drop open connections, as a dead worker would."""
        if self.site is not None:
            await self.site.stop()
            self.site = None
        server = self.runner.server
        for conn in list(server.connections if server is not None else ()):
            if conn.transport is not None:
                conn.transport.abort()


async def start_workers(configs: Sequence[EmulatorConfig]) -> list[HostedWorker]:
    tokenizer = Tokenizer()
    hosted: list[HostedWorker] = []
    try:
        for config in configs:
            runner = web.AppRunner(create_app(config, tokenizer), handler_cancellation=True,
                                   access_log=None)
            await runner.setup()
            worker = HostedWorker(config, runner)
            hosted.append(worker)
            faults = config.faults
            if not faults.refuse_connections:
                await worker.listen()
            if faults.refuse_after_s is not None:
                worker.tasks.append(asyncio.create_task(_refuse_window(
                    worker, faults.refuse_after_s, faults.refuse_for_s)))
    except BaseException:
        await stop_workers(hosted)
        raise
    return hosted


async def _refuse_window(worker: HostedWorker, after_s: float, for_s: float | None) -> None:
    await asyncio.sleep(after_s)
    await worker.refuse()
    if for_s is not None:
        await asyncio.sleep(for_s)
        await worker.listen()


async def stop_workers(hosted: Sequence[HostedWorker]) -> None:
    for worker in hosted:
        for task in worker.tasks:
            await cancel_and_wait(task)
        await worker.runner.cleanup()


async def serve(configs: Sequence[EmulatorConfig], parent_pid: int | None = None) -> None:
    """Run until SIGINT/SIGTERM/SIGHUP, or until ``parent_pid`` is no longer the parent;
    print one ready line per worker on stderr. SIGHUP too: a closed terminal sends it to
    `kvroute up`'s whole process group, and its default ended the emulators at once, cutting
    the streams the router was draining."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    watch = (asyncio.create_task(_stop_when_orphaned(parent_pid, stop))
             if parent_pid is not None else None)
    hosted = await start_workers(configs)
    try:
        for worker in hosted:
            c = worker.config
            # one that refuses connections does not listen: a script waiting for the line
            # must not take it for a worker that answers
            refusing = " (refusing connections: faults.refuse_connections)" if (
                c.faults.refuse_connections) else ""
            print(f"{READY_LINE}: {c.worker_id} {c.gpu.name} {c.model_name} "
                  f"{c.scheme}://{host_port(c.host, c.port)} time_scale={c.time_scale}{refusing}",
                  file=sys.stderr, flush=True)
        await stop.wait()
    finally:
        if watch is not None:
            await cancel_and_wait(watch)
        await stop_workers(hosted)


async def _stop_when_orphaned(parent_pid: int, stop: asyncio.Event) -> None:
    while not stop.is_set():
        if os.getppid() != parent_pid:
            print(f"the parent process {parent_pid} is gone (killed?): this emulator stops "
                  "too, leaving its ports free", file=sys.stderr, flush=True)
            stop.set()
            return
        await asyncio.sleep(PARENT_CHECK_S)


def parent_pid_from(environ: Mapping[str, str]) -> int | None:
    """The pid ``PARENT_PID_ENV`` names (None when unset or not a pid)."""
    value = environ.get(PARENT_PID_ENV, "")
    return int(value) if value.isdigit() and int(value) > 1 else None
