"""``ClientKeysReloader``: the router's client keys, kept current with the tenant keys file.

The keys of ``--api-key`` never change while the router runs; those of ``--api-keys-file``
are read again when the file changes (its modification time or size, polled every
``interval_s``, as the routing file is), so a tenant's key is added or retired without a
restart. New content is applied once it is read the same at two polls running, so a file
written in place in several steps is not applied half-written (its later tenants refused 401
meanwhile), and a file only touched changes nothing. The new keys take over in one
assignment (``reloader.keys``, read by the middleware for each request). A file that can no
longer be read or parsed is refused: the keys in force stay, and the refusal is logged once
per change of the file. No key is logged. Each reload's outcome goes to ``on_result`` (the
router's ``kvroute_client_keys_last_reload_successful`` and
``kvroute_client_keys_reloads_total``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from router.client_auth import ClientKeys, TenantKeysError, load_tenant_keys
from workers.file_watch import PeriodicCheck, SettledContent, file_content, file_stamp

log = logging.getLogger(__name__)


class ClientKeysReloader:
    """Owns the current ``ClientKeys``: the bare keys and those of one tenant keys file."""

    def __init__(self, bare: Sequence[str], path: Path | None,
                 interval_s: float = 1.0,
                 on_result: Callable[[bool], None] | None = None) -> None:
        self._bare = tuple(bare)
        self._on_result = on_result
        self.path = path
        self._stamp = file_stamp(path) if path is not None else None
        content, digest = file_content(path) if path is not None else (None, None)
        self._content = SettledContent(digest)
        tenants = load_tenant_keys(path, content) if path is not None else {}
        self.keys = ClientKeys(self._bare, tenants)       # raises on a bad file at start
        self._warn_shadowed(tenants)
        self._periodic = PeriodicCheck(self._check, interval_s,
                                       f"client-keys-reloader:{path}", "tenant keys reload")

    def check(self) -> bool:
        """Read the file again if it changed; whether new keys took over."""
        if self.path is None:
            return False
        stamp = file_stamp(self.path)
        if stamp == self._stamp and not self._content.waiting:
            return False
        self._stamp = stamp
        content, digest = file_content(self.path)
        if not self._content.offer(digest):    # unchanged, or not settled yet
            return False
        try:                                # (refused or taken: reported once)
            tenants = load_tenant_keys(self.path, content)
        except TenantKeysError as exc:
            log.error("tenant keys file refused, the keys in force stay: %s", exc)
            return self._refused()
        except Exception as exc:    # a file the parser did not foresee: refused all the same
            # (counted, for the alert to see it; the traceback would quote the file's keys)
            log.error("tenant keys file %s refused, the keys in force stay: reading it failed "
                      "(%s)", self.path, type(exc).__name__)
            return self._refused()
        self.keys = ClientKeys(self._bare, tenants)
        self._warn_shadowed(tenants)
        if self._on_result is not None:
            self._on_result(True)
        log.info("tenant keys reloaded from %s: %d key(s) of %d tenant(s)", self.path,
                 len(tenants), len(set(tenants.values())))
        return True

    def _refused(self) -> bool:
        if self._on_result is not None:
            self._on_result(False)
        return False

    def _warn_shadowed(self, tenants: dict[str, str]) -> None:
        """An operator's key (``--api-key``) listed for a tenant too is that tenant's, and
        the operator lost the /debug pages to it without a word."""
        for number, key in enumerate(self._bare, 1):
            if key in tenants:
                log.warning("key %d of --api-key is listed for tenant %s in %s: it is that "
                            "tenant's key, refused on the /debug pages; give the operator a "
                            "key of its own", number, tenants[key], self.path)

    async def _check(self) -> bool:
        return self.check()

    def start(self) -> None:
        """Watch the file (when there is one) until ``stop()``."""
        if self.path is not None:
            self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()
