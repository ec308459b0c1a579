"""Lists the young generation of every Python process it is loaded in, at every seventh
collection (the objects by type, and how many objects each type points to), and times every
collection, into ``$GCDIAG_OUT.<pid>`` as JSON lines. Loaded as ``sitecustomize``::

    mkdir /tmp/gcdiag && cp young_listing.py /tmp/gcdiag/sitecustomize.py
    GCDIAG_OUT=/tmp/gcdiag/log PYTHONPATH=/tmp/gcdiag kvroute bench replay ... --launch up

The router's file is the one whose first line's ``argv`` holds ``up`` (or ``serve``).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from collections import Counter
from typing import TextIO

LIST_EVERY = 7


class YoungListing:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.started = 0
        self.cpu_started = 0
        self.collections = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        try:
            if phase == "start":
                self.collections += 1
                if info["generation"] == 0 and self.collections % LIST_EVERY == 0:
                    self.list_young()
                self.started = time.perf_counter_ns()
                self.cpu_started = time.thread_time_ns()
                return
            self.out.write(json.dumps({
                "gen": info["generation"],
                "wall_us": (time.perf_counter_ns() - self.started) / 1e3,
                "cpu_us": (time.thread_time_ns() - self.cpu_started) / 1e3,
                "inspected": self.collections % LIST_EVERY == 0}) + "\n")
            self.out.flush()
        except Exception:      # the interpreter is shutting down
            pass

    def list_young(self) -> None:
        referents: Counter[str] = Counter()
        count: Counter[str] = Counter()
        young = gc.get_objects(generation=0)
        for obj in young:
            name = f"{type(obj).__module__}.{type(obj).__qualname__}"
            count[name] += 1
            referents[name] += len(gc.get_referents(obj))
        self.out.write(json.dumps({
            "inspect": True, "objs": len(young), "refs": sum(referents.values()),
            "top_refs": referents.most_common(15), "top_cnt": count.most_common(10)}) + "\n")


def install() -> None:
    path = os.environ.get("GCDIAG_OUT")
    if path:
        out = open(f"{path}.{os.getpid()}", "w")   # noqa: SIM115 - open for the process's life
        out.write(json.dumps({"argv": sys.argv}) + "\n")
        gc.callbacks.append(YoungListing(out))


install()
