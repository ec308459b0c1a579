"""Several router processes on one port (``kvroute serve --processes N``).

Python runs one request at a time per process; to use more cores, N processes each run a
full router (own scraper, own policy engine) on the same address with ``SO_REUSEPORT``, and
the kernel spreads connections among them; the parent first checks that no other process
listens there (with ``SO_REUSEPORT`` they would join another router's port). Each process
counts only its own in-flight requests unless ``--redis-url`` makes them share
(``router.state.redis_store``). The parent
serves too; when it stops (SIGINT/SIGTERM/SIGHUP) it passes SIGTERM on to its children by pid at
once, so that every process stops listening and drains its own requests in flight at the
same time (``Settings.drain_timeout_s``); a child still running 10 s past that is killed.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import signal
import time

from router.app import ListenError, check_port_free, run_router
from router.settings import Settings

log = logging.getLogger(__name__)


def _child(settings: Settings, log_level: str) -> None:
    logging.basicConfig(level=log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        run_router(settings)
    except ListenError as exc:
        log.error("router process %s: %s", settings.replica_id, exc)
        raise SystemExit(2) from None


def run_replicas(settings: Settings, processes: int, log_level: str = "INFO") -> None:
    """Serve with ``processes`` router processes; returns when the parent's router stops."""
    check_port_free(settings.host, settings.port)
    settings = dataclasses.replace(settings, share_port=True)
    context = multiprocessing.get_context("spawn")
    children = []
    for index in range(1, processes):
        child_settings = dataclasses.replace(
            settings, replica_id=f"{settings.replica_id}-{index}",
            process_port=None if settings.process_port is None
            else settings.process_port + index)
        child = context.Process(target=_child, args=(child_settings, log_level),
                                name=f"kvroute-replica-{index}", daemon=True)
        child.start()
        children.append(child)
    log.info("started %d extra router process(es): %s", len(children),
             ", ".join(str(c.pid) for c in children))
    def stop_children() -> None:
        for child in children:
            if child.pid is not None and child.is_alive():
                os.kill(child.pid, signal.SIGTERM)

    try:
        run_router(dataclasses.replace(settings, replica_id=f"{settings.replica_id}-0"),
                   on_stop=stop_children)
    finally:
        stop_children()             # again, if the parent stopped without a signal
        deadline = time.monotonic() + settings.drain_timeout_s + 10
        for child in children:
            child.join(timeout=max(0.0, deadline - time.monotonic()))
            if child.is_alive() and child.pid is not None:
                os.kill(child.pid, signal.SIGKILL)
                child.join()
