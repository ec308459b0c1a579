"""A text file kept open for appending that follows its path when it is rotated.

logrotate's default (rename the file, create a new one) and a plain ``mv`` leave a process
writing to the renamed file for good. ``FollowedFile`` compares, at most every ``check_s``
seconds and before a write, the file at its path with the one it holds open (device and
inode), and reopens the path when they differ or the path is gone: no signal is needed after
a rotation. When the path cannot be reopened (its folder removed) it keeps writing to the
file it holds and tries again at the next check.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO


class FollowedFile:
    """``write`` and ``flush`` of a text file opened for appending at ``path``."""

    __slots__ = ("_check_s", "_checked", "_clock", "_path", "_stream")

    def __init__(self, path: str | Path, check_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._path = Path(path)
        self._check_s = check_s
        self._clock = clock
        self._stream: TextIO = open(self._path, "a", encoding="utf-8")  # noqa: SIM115
        self._checked = clock()

    def write(self, text: str) -> int:
        now = self._clock()
        if now - self._checked >= self._check_s:
            self._checked = now
            self._follow()
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        self._stream.close()

    def _follow(self) -> None:
        held = os.fstat(self._stream.fileno())
        try:
            at_path = os.stat(self._path)
        except FileNotFoundError:
            at_path = None
        if at_path is not None and (at_path.st_dev, at_path.st_ino) == (held.st_dev,
                                                                        held.st_ino):
            return
        try:
            stream = open(self._path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close)
        except OSError:
            return                   # keep the file held; try again at the next check
        with contextlib.suppress(OSError):
            self._stream.close()     # flushes what was written before the rotation
        self._stream = stream
