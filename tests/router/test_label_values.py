"""``BoundedLabelValues``: client-chosen label values stay a bounded set."""

from __future__ import annotations

import logging

import pytest

from router.label_values import OTHER, BoundedLabelValues


def test_admits_the_first_values_up_to_the_limit_then_folds() -> None:
    tenants = BoundedLabelValues("tenant", limit=2)
    assert [tenants.label(v) for v in ("a", "b", "c", "a", "b", "d")] == [
        "a", "b", OTHER, "a", "b", OTHER]
    assert len(tenants) == 2
    assert tenants.folded == 2


def test_no_value_is_always_itself_and_never_admitted() -> None:
    tenants = BoundedLabelValues("tenant", limit=1)
    assert tenants.label("") == ""
    assert tenants.label("acme") == "acme"
    assert tenants.label("") == ""
    assert tenants.folded == 0


@pytest.mark.parametrize("value", ["x" * 65, "line\nbreak", "tab\tbed", OTHER],
                         ids=["too long", "newline", "tab", "the overflow value itself"])
def test_values_unfit_for_a_label_are_folded_without_taking_a_place(value: str) -> None:
    tenants = BoundedLabelValues("tenant", limit=5)
    assert tenants.label(value) == OTHER
    assert len(tenants) == 0 and tenants.folded == 1
    assert tenants.label("x" * 64) == "x" * 64


def test_a_zero_limit_folds_every_value() -> None:
    tenants = BoundedLabelValues("tenant", limit=0)
    assert tenants.label("acme") == OTHER
    assert tenants.label("") == ""


def test_warns_once_when_it_first_folds(caplog: pytest.LogCaptureFixture) -> None:
    tenants = BoundedLabelValues("tenant", limit=1)
    with caplog.at_level(logging.WARNING, logger="router.label_values"):
        for value in ("a", "b", "c", "d"):
            tenants.label(value)
    [record] = caplog.records
    assert "'b'" in record.getMessage() and "(other)" in record.getMessage()


@pytest.mark.parametrize(("limit", "max_chars"), [(-1, 64), (10, 0)])
def test_bad_bounds_are_refused(limit: int, max_chars: int) -> None:
    with pytest.raises(ValueError, match="tenant label"):
        BoundedLabelValues("tenant", limit, max_chars)


def test_reserved_values_take_their_places_first() -> None:
    tenants = BoundedLabelValues("tenant", limit=2)
    tenants.reserve(["acme", "", OTHER])
    assert [tenants.label(v) for v in ("first", "second", "acme")] == ["first", OTHER, "acme"]
    tenants.reserve(["beta"])          # a reload names another: acme keeps its series
    assert [tenants.label(v) for v in ("acme", "beta", "third")] == ["acme", "beta", OTHER]
    assert tenants.label(OTHER) == OTHER and tenants.folded == 3


def test_no_more_values_are_reserved_than_the_limit(caplog: pytest.LogCaptureFixture) -> None:
    """A keys file of thousands of tenants made a series each, on every worker."""
    tenants = BoundedLabelValues("tenant", limit=2)
    with caplog.at_level(logging.WARNING, logger="router.label_values"):
        tenants.reserve(["a", "b", "c"])
    assert "3 values declared, 2 kept" in caplog.text
    assert [tenants.label(v) for v in ("a", "b", "c", "d")] == ["a", "b", OTHER, OTHER]
