"""Several router processes on one port (``kvroute serve --processes N``).

Python runs one request at a time per process; to use more cores, N processes each run a
full router (own scraper, own policy engine) on the same address with ``SO_REUSEPORT``, and
the kernel spreads connections among them; the parent first checks that no other process
listens there, nor on the per-process ports of ``--metrics-port`` (with ``SO_REUSEPORT`` they
would join another router's port). Each process counts only its own in-flight requests unless
``--redis-url`` makes them share (``router.state.redis_store``). The parent serves too; when it
stops (SIGINT/SIGTERM/SIGHUP) it passes SIGTERM on to its children by pid at once, so that every
process stops listening and drains its own requests in flight at the same time
(``Settings.drain_timeout_s``); a child still running 10 s past that is killed. A second
signal to the parent cuts its drain and, by SIGUSR1, its children's; a child's own further
stop signals (Ctrl-C reaches the whole process group) do not.

The processes stand or fall together, so that a supervisor (systemd, Kubernetes) sees a
failure and restarts the service whole: a child that exits (killed, out of memory, its port
taken) stops the parent, which stops the others and exits 1; a child whose parent is gone (a
SIGKILL, which no handler sees) stops itself, where it kept the port and answered on it.
Each process's log lines name it (``[router-0-1]``).
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from multiprocessing.process import BaseProcess

from router.app import ListenError, check_port_free, run_router
from router.log_output import configure_logging, set_log_format
from router.settings import Settings

log = logging.getLogger(__name__)

def _child(settings: Settings, log_level: str, parent_pid: int, log_format: str) -> None:
    configure_logging(log_level, log_format, settings.replica_id)
    try:
        # its stop signals come from its parent (SIGTERM, once) and, with the parent, from a
        # terminal or a supervisor (Ctrl-C to the process group, systemd's control group):
        # none of them cuts its drain, only the parent's SIGUSR1 after a second signal does
        run_router(settings, stop_when=parent_gone(parent_pid, os.getppid),
                   cut_signals=(signal.SIGUSR1,))
    except ListenError as exc:
        log.error("router process %s: %s", settings.replica_id, exc)
        raise SystemExit(2) from None


def parent_gone(parent_pid: int, current_parent: Callable[[], int]) -> Callable[[], str | None]:
    """A ``stop_when`` for a child: its parent is gone when it has another parent now."""
    def check() -> str | None:
        if current_parent() != parent_pid:
            return (f"the parent router process {parent_pid} is gone (killed?): this one "
                    "stops too, leaving the port free for a restart")
        return None
    return check


def child_exited(children: Sequence[BaseProcess]) -> Callable[[], str | None]:
    """A ``stop_when`` for the parent: a child that exited stops the service."""
    def check() -> str | None:
        for child in children:
            if child.exitcode is not None:
                return (f"router process {child.name} (pid {child.pid}) exited with status "
                        f"{child.exitcode}: every process stops, and the service exits 1 "
                        "for its supervisor to restart it")
        return None
    return check


def process_ports_problem(settings: Settings, processes: int) -> str | None:
    """Why the per-process ports of ``--metrics-port`` cannot be used, or None."""
    if settings.process_port is None:
        return None
    ports = range(settings.process_port, settings.process_port + processes)
    if settings.port in ports:
        return (f"--metrics-port: the {processes} processes' ports {ports.start}.."
                f"{ports.stop - 1} include the service's port {settings.port}")
    for port in ports:
        try:
            check_port_free(settings.host, port)
        except ListenError as exc:
            return f"--metrics-port: {exc}"
    return None


def run_replicas(settings: Settings, processes: int, log_level: str = "INFO",
                 log_format: str = "text") -> int:
    """Serve with ``processes`` router processes until a signal (0) or a process's failure
    (1); ``ListenError`` when a port is taken before any starts."""
    check_port_free(settings.host, settings.port)
    problem = process_ports_problem(settings, processes)
    if problem is not None:
        raise ListenError(problem)
    settings = dataclasses.replace(settings, share_port=True)
    parent_replica = f"{settings.replica_id}-0"
    set_log_format(log_format, parent_replica)
    context = multiprocessing.get_context("spawn")
    children = []
    for index in range(1, processes):
        child_settings = dataclasses.replace(
            settings, replica_id=f"{settings.replica_id}-{index}",
            process_port=None if settings.process_port is None
            else settings.process_port + index)
        child = context.Process(target=_child, args=(child_settings, log_level, os.getpid(),
                                                         log_format),
                                name=child_settings.replica_id, daemon=True)
        child.start()
        children.append(child)
    log.info("started %d extra router process(es): %s", len(children),
             ", ".join(str(c.pid) for c in children))

    stopped = [False]

    def signal_children(sig: signal.Signals) -> None:
        for child in children:
            if child.pid is not None and child.is_alive():
                os.kill(child.pid, sig)

    def stop_children() -> None:
        if not stopped[0]:          # once: a child takes a second one as no cut
            stopped[0] = True
            signal_children(signal.SIGTERM)

    failure = None
    try:
        failure = run_router(dataclasses.replace(settings, replica_id=parent_replica),
                             on_stop=stop_children, stop_when=child_exited(children),
                             on_cut=lambda: signal_children(signal.SIGUSR1))
    finally:
        stop_children()             # if the parent stopped without a signal
        deadline = time.monotonic() + settings.drain_timeout_s + 10
        for child in children:
            child.join(timeout=max(0.0, deadline - time.monotonic()))
            if child.is_alive() and child.pid is not None:
                os.kill(child.pid, signal.SIGKILL)
                child.join()
    return 1 if failure is not None else 0
