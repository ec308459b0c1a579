"""The decode guard: TPOT slack of the requests decoding on a worker, spent by new prefills."""

from __future__ import annotations

import math

import pytest

from policies.latency import incumbents as layouts
from policies.latency.decode_guard import DecodeGuard
from policies.latency.estimator import Estimate
from policies.latency.incumbents import Incumbent, stall_of

# the thresholds of each layout: lists only, arrays only (every check at risk vectorised),
# and a worker moving between the two every few admissions
LAYOUTS = {"listed": (10**9, 0, 16), "arrays": (0, 0, 0), "switching": (70, 50, 2)}


@pytest.fixture(params=sorted(LAYOUTS))
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    arrays_from, lists_below, walked = LAYOUTS[request.param]
    monkeypatch.setattr(layouts, "ARRAYS_FROM", arrays_from)
    monkeypatch.setattr(layouts, "LISTS_BELOW", lists_below)
    monkeypatch.setattr(layouts, "WALKED_ONE_BY_ONE", walked)
    return str(request.param)


pytestmark = pytest.mark.usefixtures("layout")


def estimate(ttft: float, tpot: float, prefill: float, steps: int = 1) -> Estimate:
    return Estimate(ttft_s=ttft, tpot_s=tpot, gpu_s=1.0, cost_usd=0.0, cached_tokens=0,
                    raw_ttft_s=ttft, raw_tpot_s=tpot, prefill_s=prefill, prefill_steps=steps)


def test_an_idle_worker_fits_anything() -> None:
    guard = DecodeGuard(tpot_objective_s=0.05)
    assert guard.fits("w", 0.0, estimate(0.3, 0.02, 5.0))


def test_a_short_answer_is_protected_from_a_prefill_that_would_exceed_its_slack() -> None:
    guard = DecodeGuard(tpot_objective_s=0.05)
    # 11 tokens at 20 ms: 10 intervals, slack (50 - 20) ms x 10 = 0.3 s; decodes 0.1-0.3 s
    guard.admit("short", "w", 0.0, estimate(0.1, 0.02, 0.1), output_tokens=11)
    assert guard.incumbents("w") == 1
    assert guard.fits("w", 0.15, estimate(0.2, 0.02, prefill=0.25))
    assert not guard.fits("w", 0.15, estimate(0.4, 0.02, prefill=0.35))
    assert guard.fits("other", 0.15, estimate(0.4, 0.02, prefill=0.35))


def test_admitted_stalls_spend_the_slack_and_push_the_last_token_back() -> None:
    guard = DecodeGuard(tpot_objective_s=0.05)
    guard.admit("short", "w", 0.0, estimate(0.1, 0.02, 0.1), output_tokens=11)
    guard.admit("a", "w", 0.15, estimate(0.2, 0.02, prefill=0.2), output_tokens=1)
    # 0.1 s of slack left; the window now ends at 0.3 + 0.2 s
    assert guard.fits("w", 0.45, estimate(0.1, 0.02, prefill=0.1))
    assert not guard.fits("w", 0.45, estimate(0.15, 0.02, prefill=0.15))
    assert guard.fits("w", 0.55, estimate(0.15, 0.02, prefill=0.15))   # after its end


def test_a_long_prefill_stalls_only_the_steps_an_incumbent_has_left() -> None:
    guard = DecodeGuard(tpot_objective_s=0.05)
    # 3 tokens at 20 ms: 2 intervals, slack 60 ms, decoding 0.1-0.14 s
    guard.admit("tail", "w", 0.0, estimate(0.1, 0.02, 0.1), output_tokens=3)
    # starting at 0.12 s it has one step left; a 4-step 0.2 s prefill costs it 0.05 s
    assert guard.fits("w", 0.12, estimate(0.0, 0.02, prefill=0.2, steps=4))
    assert not guard.fits("w", 0.12, estimate(0.0, 0.02, prefill=0.2, steps=1))


def test_a_prefill_that_starts_after_the_decodes_end_costs_nothing() -> None:
    guard = DecodeGuard(tpot_objective_s=0.05)
    guard.admit("short", "w", 0.0, estimate(0.1, 0.02, 0.1), output_tokens=11)
    # waits 0.5 s in the queue before its 1 s prefill: the incumbent is done by 0.3 s
    assert guard.fits("w", 0.0, estimate(1.5, 0.02, prefill=1.0))


def test_completed_requests_are_forgotten() -> None:
    guard = DecodeGuard(tpot_objective_s=0.05)
    guard.admit("short", "w", 0.0, estimate(0.1, 0.02, 0.1), output_tokens=11)
    guard.complete("short")
    guard.complete("never-admitted")
    assert guard.incumbents("w") == 0
    assert guard.fits("w", 0.15, estimate(0.4, 0.02, prefill=5.0))


@pytest.mark.parametrize("tokens", [0, 1])
def test_a_single_token_answer_has_no_tpot_to_protect(tokens: int) -> None:
    guard = DecodeGuard(tpot_objective_s=0.05)
    guard.admit("one", "w", 0.0, estimate(0.1, 0.02, 0.1), output_tokens=tokens)
    assert guard.incumbents("w") == 0


def test_expired_incumbents_are_dropped_on_the_next_admission() -> None:
    guard = DecodeGuard(tpot_objective_s=0.05)
    guard.admit("old", "w", 0.0, estimate(0.1, 0.02, 0.1), output_tokens=11)
    guard.admit("new", "w", 10.0, estimate(0.1, 0.02, 0.1), output_tokens=11)
    assert guard.incumbents("w") == 1


def test_an_answer_past_its_objective_refuses_stalls_but_not_later_prefills() -> None:
    guard = DecodeGuard(tpot_objective_s=0.05)
    guard.admit("short", "w", 0.0, estimate(0.1, 0.02, 0.1), output_tokens=11)   # slack 0.3
    guard.admit("big", "w", 0.12, estimate(0.5, 0.02, prefill=0.5), output_tokens=1)
    # slack now -0.2, its window pushed to end at 0.8 s
    assert not guard.fits("w", 0.2, estimate(0.01, 0.02, prefill=0.01))
    assert guard.fits("w", 0.2, estimate(1.0, 0.02, prefill=0.2))   # starts at 1.0 s


def test_requests_forgotten_by_their_estimated_end_are_not_kept_for_completion() -> None:
    guard = DecodeGuard(tpot_objective_s=0.05)
    for n in range(50):     # completions never reported: each ends by 0.3 s after arrival
        guard.admit(f"r{n}", "w", float(n), estimate(0.1, 0.02, 0.1), output_tokens=11)
    assert guard.incumbents("w") == 1 and guard.tracked() == 1


def _breaks_someone(guard: DecodeGuard, worker_id: str, now: float, new: Estimate) -> bool:
    """The definition ``fits`` answers: some incumbent loses more than its slack."""
    starts = now + max(0.0, new.ttft_s - new.prefill_s)
    return any((stall := stall_of(i, starts, new)) > 0.0 and stall > i.slack_s
               for i in guard.members(worker_id))


def test_fits_and_fitting_agree_with_the_definition_under_random_traffic() -> None:
    """Spent incumbents are answered by their latest end, the rest one by one: the same
    verdict as checking every incumbent, on busy workers with spent and open slack."""
    import random

    rng = random.Random(5)
    guard = DecodeGuard(tpot_objective_s=0.05)
    workers = ["a", "b", "c"]
    now = 0.0
    verdicts = set()
    for n in range(1500):
        now += rng.expovariate(20.0)
        new = estimate(ttft=rng.uniform(0.0, 1.5), tpot=rng.uniform(0.01, 0.07),
                       prefill=rng.choice((0.0, rng.uniform(0.0, 0.8))),
                       steps=rng.randint(1, 6))
        expected = [not _breaks_someone(guard, w, now, new) for w in workers]
        assert [guard.fits(w, now, new) for w in workers] == expected, n
        ids = workers
        estimates = dict.fromkeys(workers, new)
        assert guard.fitting(range(3), ids, estimates, now) == [
            p for p in range(3) if expected[p]], n
        verdicts.update(expected)
        guard.admit(f"r{n}", rng.choice(workers), now, new, rng.randint(1, 300))
        if rng.random() < 0.3:
            guard.complete(f"r{rng.randrange(n + 1)}")
    assert verdicts == {True, False}



def test_admit_and_complete_keep_the_incumbents_the_definition_gives(layout: str) -> None:
    """Under random traffic in waves (ids reused on one worker included) the incumbents are
    those a plain model keeps: on each admission the ones past their end are dropped and
    every other is stalled by ``stall_of``; a completion drops every member of that id. To
    the bit, in either layout and moving between them."""
    import random

    rng = random.Random(11)
    guard = DecodeGuard(tpot_objective_s=0.05)
    model: list[tuple[str, Incumbent]] = []      # (worker, a copy of its incumbent)
    now = 0.0
    kinds: dict[str, str] = {}
    moves: set[tuple[str, str]] = set()
    for n in range(2000):
        # a quiet minute every 400 admissions: the workers' incumbents run out
        now += rng.expovariate(30.0) + (60.0 if n % 400 == 399 else 0.0)
        new = estimate(ttft=rng.uniform(0.0, 1.0), tpot=rng.uniform(0.0, 0.06),
                       prefill=rng.choice((0.0, rng.uniform(0.0, 0.5))),
                       steps=rng.randint(1, 5))
        worker = rng.choice("ab")
        request_id = f"r{rng.randrange(n + 1)}" if rng.random() < 0.05 else f"r{n}"
        tokens = rng.randint(0, 200)
        guard.admit(request_id, worker, now, new, tokens)
        starts = now + max(0.0, new.ttft_s - new.prefill_s)
        model = [(w, i) for w, i in model if w != worker or i.end_s > now]
        for w, incumbent in model:
            if w == worker:
                stall = stall_of(incumbent, starts, new)
                incumbent.slack_s -= stall
                incumbent.end_s += stall
        if tokens > 1:
            start = now + new.ttft_s
            model.append((worker, Incumbent(request_id, start,
                                            start + (tokens - 1) * new.tpot_s, new.tpot_s,
                                            (0.05 - new.tpot_s) * (tokens - 1))))
        if rng.random() < 0.3:
            done = f"r{rng.randrange(n + 1)}"
            owner = guard._worker_of.get(done)
            guard.complete(done)
            model = [(w, i) for w, i in model if not (i.request_id == done and w == owner)]
        for w in "ab":
            held = guard._by_worker.get(w)
            members = guard.members(w)
            assert sorted((i.request_id, i.end_s, i.slack_s) for i in members) == sorted(
                (i.request_id, i.end_s, i.slack_s) for m, i in model if m == w), (n, w)
            slacks = [i.slack_s for i in members]
            assert slacks == sorted(slacks)          # least slack first
            if held is not None and members:
                assert held.least_slack_s == min(slacks)
                assert held.last_end_s == max(i.end_s for i in members)
                assert held.spent_last_end_s == max(
                    (i.end_s for i in members if i.slack_s <= 0.0), default=-math.inf)
            kind = type(held).__name__
            if held is not None and w in kinds and kinds[w] != kind:
                moves.add((kinds[w], kind))
            if held is not None:
                kinds[w] = kind
    expected = {"listed": set(), "arrays": set(),
                "switching": {("ListedIncumbents", "ArrayIncumbents"),
                              ("ArrayIncumbents", "ListedIncumbents")}}
    assert moves == expected[layout]


def test_a_forgotten_worker_holds_no_incumbents() -> None:
    """A worker whose engine restarted, or that left the fleet, kept its incumbents (and a
    worker id churned through the fleet file kept an entry for ever)."""
    guard = DecodeGuard(tpot_objective_s=0.05)
    guard.admit("short", "w", 0.0, estimate(0.1, 0.02, 0.1), output_tokens=11)
    guard.admit("other", "v", 0.0, estimate(0.1, 0.02, 0.1), output_tokens=11)
    guard.forget_worker("w")
    assert guard.incumbents("w") == 0 and guard.tracked() == 1
    assert guard.fits("w", 0.15, estimate(0.4, 0.02, prefill=5.0))
    guard.complete("short")                     # its end, reported later, finds nothing
    assert guard.incumbents("v") == 1
