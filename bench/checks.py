"""Bad input to a ``kvroute bench`` command: one line, exit code 2, before any long work.

Each optional sub-command's module exposes ``check(args) -> str | None``: the first problem
with its options (``sim.cli.range_problem`` and the helpers here), None when they are fine.
``refusal`` runs it, then makes sure ``--out`` can be written (creating the folder, as the
benchmark would at its end), and prints ``kvroute bench <command>: <problem>`` on stderr.
``bench.cli`` calls it before a sub-command's ``run`` and each ``run`` calls it first too, for
its other callers (``python -m bench.<module>``, tests); it is cheap and idempotent.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from sim.cli import first_problem, out_problem, range_problem

Check = Callable[[argparse.Namespace], str | None]

__all__ = ["Check", "cpu_list", "cpu_list_problem", "first_problem", "int_list",
           "int_list_problem", "out_problem", "range_problem", "refusal", "refuse"]


def refuse(command: str, problem: str) -> int:
    """Bad input: one line on stderr, exit code 2 (as ``kvroute sim`` does)."""
    print(f"kvroute bench {command}: {problem}", file=sys.stderr)
    return 2


def refusal(command: str, args: argparse.Namespace, check: Check | None) -> int | None:
    """2 after refusing the first problem of ``check(args)``, else of ``--out``; None when
    the command may run."""
    problem = check(args) if check is not None else None
    problem = problem or out_problem(getattr(args, "out", None))
    return refuse(command, problem) if problem else None


def int_list(text: str) -> list[int]:
    """The integers of a comma-separated option, blanks skipped; ValueError for another word."""
    return [int(part) for part in str(text).split(",") if part.strip()]


def int_list_problem(option: str, text: str, low: int) -> str | None:
    """The problem with a comma-separated list of integers that must each be >= ``low``."""
    try:
        values = int_list(text)
    except ValueError:
        return f"{option}: expected comma-separated integers, got {text!r}"
    if not values:
        return f"{option}: give at least one number"
    return first_problem(*(range_problem(option, value, low) for value in values))


def cpu_list(text: str) -> tuple[int, ...]:
    """``"0,2-4"`` → (0, 2, 3, 4), as ``taskset -c`` reads it; ValueError when malformed."""
    cpus: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        first, last = int(low), int(high if dash else low)
        if first < 0 or last < first:
            raise ValueError(text)
        cpus.extend(range(first, last + 1))
    return tuple(cpus)


def cpu_list_problem(option: str, text: str, *, empty: bool = False) -> str | None:
    """The problem with a CPU list such as ``0,2-4`` (``empty``: "" is allowed, unpinned)."""
    if empty and not text:
        return None
    try:
        cpu_list(text)
    except ValueError:
        return f"{option}: expected a CPU list such as 0,2-4, got {text!r}"
    return None
