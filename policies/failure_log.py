"""How a failing plugin is logged: its traceback at most once a minute per plugin.

A plugin that raises is skipped for that request (``policies.profile``,
``policies.producers.runner``); one failing on every request wrote a full traceback per
request, hundreds a second under load, burying every other line of the log. The first
failure is logged with its traceback at once; later ones within ``interval_s`` are counted,
and the next line logged says how many were not. The decision's ``skipped_plugins`` and
``kvroute_plugin_failures_total`` still count every one. It is called on the event loop (a
producer run in a thread raises into the coroutine awaiting it); from several threads at
once a count could be lost, never a first line.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

DEFAULT_INTERVAL_S = 60.0


class PluginFailureLog:
    """Call ``failed`` inside the ``except`` block that caught the plugin's exception (or
    anywhere, for a plugin that failed without one: a picker's answer that is no candidate)."""

    __slots__ = ("_clock", "_last", "_logger", "_unlogged", "interval_s")

    def __init__(self, logger: logging.Logger, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}       # plugin -> when its traceback was logged
        self._unlogged: dict[str, int] = {}     # plugin -> failures since, not logged

    def failed(self, plugin: str, message: str, *args: object) -> None:
        """Log ``message % args`` as an error (with the exception being handled, if any),
        unless ``plugin``'s was logged less than ``interval_s`` ago (then it is counted)."""
        now = self._clock()
        last = self._last.get(plugin)
        if last is not None and now - last < self.interval_s:
            self._unlogged[plugin] = self._unlogged.get(plugin, 0) + 1
            return
        self._last[plugin] = now
        unlogged = self._unlogged.pop(plugin, 0)
        if unlogged:
            message += " (%d more failure(s) of %s in the %g s before were not logged)"
            args = (*args, unlogged, plugin, self.interval_s)
        self._logger.error(message, *args, exc_info=sys.exc_info()[0] is not None)
