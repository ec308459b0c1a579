"""workers/file_watch.py: a file's stamp, and a periodic check that survives a failing run."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from workers.file_watch import PeriodicCheck, file_stamp


def test_the_stamp_moves_with_the_file_and_is_none_without_it(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    assert file_stamp(path) is None
    path.write_text("a: 1\n")
    first = file_stamp(path)
    assert first is not None and first[4] == 5            # (dev, inode, mtime, ctime, size)
    os.utime(path, ns=(first[2] + 10**9, first[2] + 10**9))
    touched = file_stamp(path)
    assert touched is not None and touched[2] == first[2] + 10**9 and touched[4] == 5


def test_a_copy_keeping_size_and_modification_time_moves_the_stamp(tmp_path: Path) -> None:
    """``cp -p``, ``rsync -a`` or a ConfigMap's symlink swap keep both: the change time and
    the inode still move, so the file is seen to change."""
    path, staged = tmp_path / "f.yaml", tmp_path / "staged.yaml"
    path.write_text("a: 1\n")
    staged.write_text("a: 2\n")
    before = os.stat(path)
    os.utime(staged, ns=(before.st_atime_ns, before.st_mtime_ns))
    first = file_stamp(path)
    os.replace(staged, path)
    after = file_stamp(path)
    assert first is not None and after is not None
    assert (after[2], after[4]) == (first[2], first[4]) and after != first


async def test_a_failing_check_is_logged_and_the_next_one_runs(
        caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    async def check() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("bad change")

    periodic = PeriodicCheck(check, 0.01, "test-check", "test reload")
    with caplog.at_level(logging.ERROR, logger="workers.file_watch"):
        periodic.start()
        for _ in range(200):
            if len(calls) >= 3:
                break
            await asyncio.sleep(0.01)
        await periodic.stop()
    assert len(calls) >= 3
    assert [r.getMessage() for r in caplog.records] == [
        "test reload crashed; will retry on the next change"]
    stopped = len(calls)
    await asyncio.sleep(0.05)
    assert len(calls) == stopped                    # stopped means stopped


def test_settled_content_takes_new_content_read_the_same_twice_running() -> None:
    from workers.file_watch import SettledContent

    content = SettledContent(b"a")
    assert not content.offer(b"a") and not content.waiting          # unchanged
    assert not content.offer(b"b") and content.waiting              # new: read it again
    assert not content.offer(b"c") and content.waiting              # new again: still moving
    assert content.offer(b"c") and content.settled == b"c" and not content.waiting
    assert not content.offer(b"c")                                  # taken: nothing new
    content.settled = None                                          # forget: same is new
    assert not content.offer(b"c") and content.offer(b"c")
