"""``RequestIds``: ids unique among the requests in flight, the client's own kept when free."""

from __future__ import annotations

import re

import pytest

from router.request_ids import HELD_AFTER_CUT_S, MAX_HELD_IDS, RequestIds


def test_the_clients_id_is_kept_while_no_request_in_flight_has_it() -> None:
    ids = RequestIds(prefix="r")
    first = ids.claim("trace-7")
    assert first == "trace-7"
    ids.release(first)
    assert ids.claim("trace-7") == "trace-7"


def test_an_id_in_flight_gets_a_suffix_until_released() -> None:
    ids = RequestIds(prefix="r")
    claimed = [ids.claim("same") for _ in range(3)]
    assert claimed[0] == "same"
    assert len(set(claimed)) == 3 and all(c.startswith("same-r-") for c in claimed[1:])
    assert len(ids) == 3
    for request_id in claimed:
        ids.release(request_id)
    assert len(ids) == 0
    assert ids.claim("same") == "same"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_id_of_a_request_cut_at_its_worker_stays_taken_a_moment() -> None:
    """Its worker runs it until it notices the cut: the same id sent again at once gets a
    suffix (the worker would answer 400 "already running"), and is the client's own again
    once ``HELD_AFTER_CUT_S`` has passed; a request that ended whole frees its id at once."""
    clock = Clock()
    ids = RequestIds(prefix="r", clock=clock)
    cut = ids.claim("job-42")
    ids.hold_after_release(cut)
    ids.release(cut)
    again = ids.claim("job-42")
    assert again.startswith("job-42-r-")
    ids.release(again)
    clock.now += HELD_AFTER_CUT_S - 0.01
    assert ids.claim("job-42").startswith("job-42-r-")
    clock.now += 0.02
    whole = ids.claim("job-42")
    assert whole == "job-42"
    ids.release(whole)
    assert ids.claim("job-42") == "job-42"
    ids.hold_after_release("never-claimed")          # harmless
    ids.release("never-claimed")
    assert ids.claim("never-claimed") == "never-claimed"


def test_ids_held_after_cuts_are_bounded() -> None:
    clock = Clock()
    ids = RequestIds(prefix="r", clock=clock)
    for n in range(MAX_HELD_IDS + 10):
        request_id = ids.claim(f"abort-{n}")
        ids.hold_after_release(request_id)
        ids.release(request_id)
    assert ids.claim("abort-9") == "abort-9"              # the oldest ten went first
    assert ids.claim("abort-10") != "abort-10"            # the rest are held
    assert ids.claim(f"abort-{MAX_HELD_IDS + 9}") != f"abort-{MAX_HELD_IDS + 9}"


GENERATED = re.compile(r"r-[0-9a-f]{16}")


def test_without_a_client_id_each_request_gets_a_new_one() -> None:
    """Random, not counted: ``chatcmpl-<id>`` told each client how many requests the router
    had taken."""
    ids = RequestIds(prefix="r")
    claimed = [ids.claim(None), ids.claim(""), ids.claim(None)]
    assert len(set(claimed)) == 3 and all(GENERATED.fullmatch(c) for c in claimed)


def test_a_generated_id_sent_back_by_a_client_stays_unique() -> None:
    ids = RequestIds(prefix="r")
    generated = ids.claim(None)
    assert ids.claim(generated) != generated


def test_releasing_an_unknown_id_is_harmless() -> None:
    ids = RequestIds()
    ids.release("never-claimed")
    assert len(ids) == 0


@pytest.mark.parametrize("given", ["id\udcff\udcfe", "tab\there", "nul\x00", "line\nbreak",
                                   "line\u2028separator", "x" * 257, "caf\u00e9",
                                   "\u8981\u6c42-\U0001f680"],
                         ids=["bytes not utf-8", "tab", "nul", "newline", "line separator",
                              "over 256 characters", "latin", "cjk and emoji"])
def test_an_id_that_is_not_printable_ascii_is_replaced(given: str) -> None:
    """A non-ASCII id was echoed raw (UTF-8 bytes) in the response's x-request-id, which
    header readers take as Latin-1."""
    ids = RequestIds(prefix="r")
    assert GENERATED.fullmatch(ids.claim(given))
    assert ids.claim("trace-01:ab/cd") == "trace-01:ab/cd"     # printable ASCII is kept
    assert ids.claim("y" * 256) == "y" * 256


def test_a_suffixed_id_sent_back_while_in_flight_gets_another_suffix() -> None:
    """A client sending the suffixed id it was given, while both requests run, was given the
    same id twice: two requests held one id, and the first to end freed it for both."""
    ids = RequestIds(prefix="p")
    first = ids.claim("same")
    second = ids.claim("same")
    third = ids.claim(second)
    assert len({first, second, third}) == 3 and len(ids) == 3
    ids.release(second)
    assert ids.claim(second) == second
