"""policies/producers/previous_turns.py: the answer length of the turn a prompt continues."""

from __future__ import annotations

from policies.producers.previous_turns import PreviousTurns


def chain(*blocks: int) -> list[int]:
    """A chain of block hashes: in a real chain each names its whole prefix; here the
    tests pick numbers that are distinct wherever the prefixes differ."""
    return list(blocks)


def test_a_prompt_that_continues_a_finished_one_gets_its_answer_length() -> None:
    turns = PreviousTurns(stride=1, reach=0)
    turns.remember(chain(1, 2, 3), 40)
    assert turns.answer_before(chain(1, 2, 3, 4, 5)) == 40      # the same conversation
    assert turns.answer_before(chain(1, 2, 3)) == 40            # the same prompt again
    assert turns.answer_before(chain(1, 2, 9, 10)) is None      # parts after block 2
    assert turns.answer_before(chain(7, 8)) is None


def test_the_deepest_remembered_turn_is_the_one_continued() -> None:
    turns = PreviousTurns(stride=1, reach=0)
    turns.remember(chain(1, 2), 10)
    turns.remember(chain(1, 2, 3, 4), 300)
    assert turns.answer_before(chain(1, 2, 3, 4, 5, 6)) == 300
    assert turns.answer_before(chain(1, 2, 3, 9)) == 10


def test_a_live_continuation_is_found_at_the_last_kept_block() -> None:
    previous = list(range(100, 143))                 # 43 blocks: kept are 39, 31, ...
    turns = PreviousTurns(stride=8, reach=32)
    turns.remember(previous, 12)
    assert turns.answer_before([*previous, 500, 501]) == 12
    assert turns.answer_before(previous[:40] + [600] * 10) == 12      # shares up to block 39
    assert turns.answer_before([*list(range(300, 343)), 500]) is None


def test_a_turn_whose_last_blocks_were_not_kept_is_found_within_reach() -> None:
    # a trace of whole 512-token blocks renames the block that held the end of the prompt:
    # the next turn shares the prompt up to a few blocks before its last one
    previous = list(range(100, 140))                 # 40 blocks
    turns = PreviousTurns(stride=8, reach=32)
    turns.remember(previous, 77)
    shared_to = {39: True, 31: True, 20: True, 7: True, 6: False}
    for last_shared, found in shared_to.items():
        continuation = [*previous[:last_shared + 1], 900 + last_shared, 950 + last_shared]
        assert (turns.answer_before(continuation) == 77) is found, last_shared


def test_a_later_turn_takes_over_the_blocks_it_shares_with_the_one_before() -> None:
    turns = PreviousTurns(stride=2, reach=4)
    first = list(range(10))                  # keeps blocks 9, 7 and 5
    turns.remember(first, 10)
    second = [*first, 20, 21]                # keeps 11, 9 and 7: holds 9, the first's deepest
    turns.remember(second, 300)
    assert len(turns) == 4
    assert turns.answer_before([*first, 30, 31]) == 300      # a sibling of the second turn
    assert turns.answer_before([*second, 40]) == 300


def test_a_block_shared_by_two_different_prompts_predicts_nothing() -> None:
    turns = PreviousTurns(stride=2, reach=4)
    system = list(range(8))                  # a system prompt both conversations start with
    turns.remember([*system, 100, 101], 10)  # keeps 9 (its own), 7 and 5 (the system's)
    turns.remember([*system, 200, 201], 500)     # 7 and 5 shared, 9 not: ambiguous
    assert turns.answer_before([*system, 300, 301, 302]) is None    # a third conversation
    assert turns.answer_before([*system, 100, 101, 102]) == 10      # the first, continued
    assert turns.answer_before([*system, 200, 201, 202]) == 500


def test_the_lookup_goes_back_at_most_lookback_blocks() -> None:
    turns = PreviousTurns(stride=1, reach=0, lookback=4)
    turns.remember(chain(1, 2), 10)
    assert turns.answer_before(chain(1, 2, 3, 4, 5)) == 10       # block 2 is 4th from the end
    assert turns.answer_before(chain(1, 2, 3, 4, 5, 6)) is None


def test_memory_is_bounded_least_recently_used_first() -> None:
    turns = PreviousTurns(capacity=3, stride=1, reach=0)
    turns.remember(chain(1), 10)
    turns.remember(chain(2), 20)
    turns.remember(chain(3), 30)
    assert turns.answer_before(chain(1, 9)) == 10        # 1 is now the most recently used
    turns.remember(chain(4), 40)                         # 2 goes
    assert len(turns) == 3
    assert turns.answer_before(chain(2, 9)) is None
    assert [turns.answer_before(chain(b, 9)) for b in (1, 3, 4)] == [10, 30, 40]
    nothing = PreviousTurns(capacity=0)
    nothing.remember(chain(1, 2), 10)
    assert len(nothing) == 0
    assert nothing.answer_before(chain(1, 2, 3)) is None


def test_each_finished_prompt_keeps_a_few_hashes() -> None:
    turns = PreviousTurns(stride=8, reach=32)
    turns.remember(list(range(1000)), 5)
    assert len(turns) == 5          # blocks 999, 991, 983, 975 and 967 (p % 8 == 7)
    turns.remember(list(range(5000, 5010)), 5)
    assert len(turns) == 6          # a 10-block prompt: block 7
    turns.remember(list(range(6000, 6007)), 5)
    assert len(turns) == 6          # under 8 blocks: none
    turns.remember([], 5)
    turns.remember(list(range(7000, 7010)), 0)         # no answer: nothing learnt
    assert len(turns) == 6
