"""``ClientKeysReloader``: the router's client keys, kept current with the tenant keys file.

The keys of ``--api-key`` never change while the router runs; those of ``--api-keys-file``
are read again when the file changes (its modification time or size, polled every
``interval_s``, as the routing file is), so a tenant's key is added or retired without a
restart. The new keys take over in one assignment (``reloader.keys``, read by the
middleware for each request). A file that can no longer be read or parsed is refused: the
keys in force stay, and the refusal is logged once per change of the file. No key is logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from router.client_auth import ClientKeys, TenantKeysError, load_tenant_keys
from workers.task_cancel import cancel_and_wait

log = logging.getLogger(__name__)


class ClientKeysReloader:
    """Owns the current ``ClientKeys``: the bare keys and those of one tenant keys file."""

    def __init__(self, bare: Sequence[str], path: Path | None,
                 interval_s: float = 1.0) -> None:
        self._bare = tuple(bare)
        self.path = path
        self.interval_s = interval_s
        self._stamp = _stamp(path) if path is not None else None
        tenants = load_tenant_keys(path) if path is not None else {}
        self.keys = ClientKeys(self._bare, tenants)       # raises on a bad file at start
        self._task: asyncio.Task[None] | None = None

    def check(self) -> bool:
        """Read the file again if it changed; whether new keys took over."""
        if self.path is None:
            return False
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            tenants = load_tenant_keys(self.path)
        except TenantKeysError as exc:
            log.error("tenant keys file refused, the keys in force stay: %s", exc)
            return False
        self.keys = ClientKeys(self._bare, tenants)
        log.info("tenant keys reloaded from %s: %d key(s) of %d tenant(s)", self.path,
                 len(tenants), len(set(tenants.values())))
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.check()
            except Exception:      # never let the watcher die: the next change gets a try
                log.exception("tenant keys reload crashed; will retry on the next change")

    def start(self) -> None:
        if self.path is not None and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(
                self.run(), name=f"client-keys-reloader:{self.path}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size
