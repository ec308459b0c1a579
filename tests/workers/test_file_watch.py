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
    assert first is not None and first[1] == 5
    os.utime(path, ns=(first[0] + 10**9, first[0] + 10**9))
    assert file_stamp(path) == (first[0] + 10**9, 5)


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
