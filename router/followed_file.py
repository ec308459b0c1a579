"""A text file kept open for appending that follows its path when it is rotated.

logrotate's default (rename the file, create a new one) and a plain ``mv`` leave a process
writing to the renamed file for good. ``FollowedFile`` compares, at most every ``check_s``
seconds and before a write, the file at its path with the one it holds open (device and
inode), and reopens the path when they differ or the path is gone: no signal is needed after
a rotation. When the path cannot be reopened (its folder removed) it keeps writing to the
file it holds and tries again at the next check.

Each ``write`` is one ``os.write`` on a descriptor opened with ``O_APPEND``, unbuffered, so
that the lines of several processes appending to one file (``serve --processes N``) never
mix. A buffered stream kept what a full disk refused and wrote it later, after other
processes' lines: torn lines in the file. A write the disk took only part of (``ENOSPC``,
a size limit) raises, and the next write begins with a newline when the file does not end
with one, which ends the torn line there: the cut line is lost, and at most the one line
another process appended right after it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


class FollowedFile:
    """``write`` and ``flush`` of a text file opened for appending at ``path``."""

    __slots__ = ("_check_s", "_checked", "_clock", "_fd", "_path", "_torn")

    def __init__(self, path: str | Path, check_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._path = Path(path)
        self._check_s = check_s
        self._clock = clock
        self._fd = os.open(self._path, _FLAGS, 0o644)
        self._checked = clock()
        self._torn = False            # the last write ended mid-line

    def write(self, text: str) -> int:
        if self._fd < 0:
            raise ValueError(f"{self._path}: written after close")
        now = self._clock()
        if now - self._checked >= self._check_s:
            self._checked = now
            self._follow()
        data = text.encode("utf-8")
        if self._torn and not self._ends_a_line():
            data = b"\n" + data
        written = os.write(self._fd, data)
        if written < len(data):
            self._torn = written > 0 or self._torn
            raise OSError(errno.ENOSPC, f"{self._path}: the disk took {written} of "
                                        f"{len(data)} bytes")
        self._torn = False
        return len(text)

    def _ends_a_line(self) -> bool:
        """Whether the file ends with a newline now (another process may have appended a
        line after the torn one; it ended that line)."""
        size = os.fstat(self._fd).st_size
        return size == 0 or os.pread(self._fd, 1, size - 1) == b"\n"

    def flush(self) -> None:
        """Nothing is held back: each ``write`` went to the file whole, or raised."""

    def close(self) -> None:
        """Closes the file once; a later write raises (the number may name another file)."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def _follow(self) -> None:
        held = os.fstat(self._fd)
        try:
            at_path = os.stat(self._path)
        except FileNotFoundError:
            at_path = None
        if at_path is not None and (at_path.st_dev, at_path.st_ino) == (held.st_dev,
                                                                        held.st_ino):
            return
        try:
            fd = os.open(self._path, _FLAGS, 0o644)
        except OSError:
            return                   # keep the file held; try again at the next check
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd, self._torn = fd, False
