"""Watching a file by polling: its stamp, and a check run every few seconds.

* ``file_stamp(path)``: the file's identity (device, inode), modification and change times
  and size, or None when it cannot be read: what the routing file's and the tenant keys
  file's reloaders compare. The change time moves on every write and rename and no tool can
  set it, so a file replaced by one of the same size and modification time (``cp -p``,
  ``rsync -a``, an archive, a ConfigMap's symlink swap) is still seen.
* ``SettledContent``: new content (by its digest) is taken once it reads the same at two
  polls running, so a file written in place in several steps is not taken half-written,
  and content read again unchanged (a touch) is not new.
* ``PeriodicCheck``: runs an async ``check()`` every ``interval_s`` on the running loop
  until stopped. A check that raises is logged (``what``, e.g. "routing reload") and the next
  one runs as usual: a watcher never dies of one bad change.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from workers.task_cancel import cancel_and_wait

log = logging.getLogger(__name__)


FileStamp = tuple[int, int, int, int, int]


def file_stamp(path: Path) -> FileStamp | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):     # ValueError: a path with a NUL byte
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size


def file_digest(path: Path) -> bytes:
    """SHA-256 of the file's bytes, or of the reason it cannot be read (a missing file is
    content too: it settles, and is refused, like any other)."""
    return file_content(path)[1]


def file_content(path: Path) -> tuple[bytes | None, bytes]:
    """The file's bytes (None: it cannot be read) and their ``file_digest``, of one read: a
    reloader parses the bytes it settled on, not a second read that a write may have cut."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        return None, hashlib.sha256(f"unreadable: {exc.strerror}".encode()).digest()
    except ValueError as exc:         # a path with a NUL byte
        return None, hashlib.sha256(f"unreadable: {exc}".encode()).digest()
    return content, hashlib.sha256(content).digest()


class SettledContent:
    """The content last taken from a watched file (``settled``, a digest; None: none yet, so
    whatever is read next is new), and new content read once, waiting to be read again."""

    __slots__ = ("_pending", "settled")

    def __init__(self, settled: bytes | None) -> None:
        self.settled = settled
        self._pending: bytes | None = None

    @property
    def waiting(self) -> bool:
        """New content was read at the last poll: the next must read the file again."""
        return self._pending is not None

    def offer(self, digest: bytes) -> bool:
        """This poll read content ``digest``: True when it is new and read the same at the
        poll before (it is ``settled`` now), else False (unchanged, or new and waiting)."""
        if digest == self.settled:
            self._pending = None
            return False
        if digest != self._pending:
            self._pending = digest
            return False
        self._pending = None
        self.settled = digest
        return True


class PeriodicCheck:
    """``check()`` every ``interval_s``, from ``start()`` until ``stop()``."""

    def __init__(self, check: Callable[[], Awaitable[object]], interval_s: float,
                 name: str, what: str) -> None:
        self._check = check
        self.interval_s = interval_s
        self._name = name
        self._what = what
        self._task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Check forever (until cancelled)."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self._check()
            except Exception:     # the next change gets another try
                log.exception("%s crashed; will retry on the next change", self._what)

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name=self._name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
