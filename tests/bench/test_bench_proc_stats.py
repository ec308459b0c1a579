from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench.proc_stats import cpu_seconds, rss_bytes, tree_pids


@pytest.mark.integration
def test_tree_includes_children_and_their_cpu() -> None:
    # The child burns CPU, then blocks on stdin (inherited from the parent) until the test
    # closes it, so it is still alive when its CPU and memory are read, however slow the machine.
    burn = ("import sys, time\nend = time.process_time() + 0.3\n"
            "while time.process_time() < end: pass\nsys.stdin.read()\n")
    parent = subprocess.Popen(
        [sys.executable, "-c",
         f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"],
        stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while len(tree_pids(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        pids = tree_pids(parent.pid)
        assert pids[0] == parent.pid and len(pids) == 2
        child = pids[1]
        while time.monotonic() < deadline and cpu_seconds(child) < 0.25:
            time.sleep(0.02)
        child_cpu = cpu_seconds(child)          # read first: CPU only grows, so the tree read
        assert cpu_seconds(parent.pid) >= child_cpu >= 0.25   # after it includes at least this
        assert rss_bytes(parent.pid) > rss_bytes(child) > 0
    finally:
        assert parent.stdin is not None
        parent.stdin.close()
        parent.wait(20)
    assert tree_pids(parent.pid) == [parent.pid]     # gone: only the root id is echoed
    assert cpu_seconds(parent.pid) == 0.0


def test_own_process_is_counted() -> None:
    before = cpu_seconds(os.getpid())
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    assert cpu_seconds(os.getpid()) > before
