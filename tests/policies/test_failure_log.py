"""``policies.failure_log``: a plugin failing on every request logs its traceback once an
interval, then says how many failures went unlogged; each plugin on its own."""

from __future__ import annotations

import logging

import pytest

from policies.failure_log import PluginFailureLog


def test_a_plugin_failing_again_and_again_is_logged_once_an_interval(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    failures = PluginFailureLog(logging.getLogger("test.failures"), 60.0, lambda: now[0])
    caplog.set_level(logging.ERROR, "test.failures")
    for _ in range(5):
        try:
            raise ValueError("bad score")
        except ValueError:
            failures.failed("zone", "filter %s failed; skipped", "zone")
    assert len(caplog.records) == 1
    assert caplog.records[0].exc_info is not None
    assert caplog.records[0].getMessage() == "filter zone failed; skipped"
    failures.failed("kv%s", "scorer %s failed; skipped", "kv%s")     # another plugin: logged
    assert len(caplog.records) == 2 and not caplog.records[1].exc_info   # no exception
    now[0] += 60.0
    failures.failed("zone", "filter %s failed; skipped", "zone")
    assert caplog.records[2].getMessage() == (
        "filter zone failed; skipped (4 more failure(s) of zone in the 60 s before were not "
        "logged)")
