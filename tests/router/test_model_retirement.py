"""``router.model_retirement``: a model name the router holds series of and no worker serves
is forgotten once it has been so for the grace, on a test clock."""

from __future__ import annotations

import pytest

from router.model_retirement import ModelRetirement


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_name_unknown_for_the_grace_is_forgotten_once() -> None:
    clock, held, known, forgotten = Clock(), {"base", "fin", "sql"}, {"base", "sql"}, []

    def forget(name: str) -> None:
        forgotten.append(name)
        held.discard(name)

    retirement = ModelRetirement(lambda: held, lambda: known, forget, grace_s=60.0,
                                 clock=clock)
    assert retirement.sweep() == []            # unknown from now on
    clock.now = 59.0
    assert retirement.sweep() == []
    known.discard("sql")                       # unloaded at 59 s: its own grace
    clock.now = 60.0
    assert retirement.sweep() == ["fin"]
    assert retirement.sweep() == []
    clock.now = 100.0
    known.add("sql")                           # reloaded within its grace: kept
    assert retirement.sweep() == []
    known.discard("sql")
    clock.now = 150.0
    assert retirement.sweep() == []            # its grace starts again
    clock.now = 210.0
    assert retirement.sweep() == ["sql"]
    assert forgotten == ["fin", "sql"] and held == {"base"}


def test_a_failing_forget_is_logged_and_the_others_still_go(
        caplog: pytest.LogCaptureFixture) -> None:
    held, forgotten = {"a", "b"}, []

    def forget(name: str) -> None:
        if name == "a":
            raise RuntimeError("boom")
        forgotten.append(name)

    retirement = ModelRetirement(lambda: held, set, forget, grace_s=0.0, clock=Clock())
    assert retirement.sweep() == ["a", "b"]
    assert forgotten == ["b"]
    assert "forgetting model 'a' failed" in caplog.text
