"""Output plans: exact lengths with ignore_eos, EOS endings below max_tokens and not before
min_tokens."""

from __future__ import annotations

import random

from workers.emulator.config import OutputLengthConfig
from workers.emulator.outputs import draw_length, plan_output

VOCAB = (11, 12, 13)
EOS = 99


def test_ignore_eos_generates_exactly_max_tokens() -> None:
    plan = plan_output(random.Random(1), OutputLengthConfig(dist="fixed", value=2), 7, True,
                       VOCAB, EOS)
    assert len(plan.token_ids) == 7 and plan.finish_reason == "length"
    assert EOS not in plan.token_ids and set(plan.token_ids) <= set(VOCAB)


def test_short_draw_ends_on_eos() -> None:
    plan = plan_output(random.Random(1), OutputLengthConfig(dist="fixed", value=4), 10, False,
                       VOCAB, EOS)
    assert len(plan.token_ids) == 4 and plan.token_ids[-1] == EOS
    assert plan.finish_reason == "stop"


def test_long_draw_is_capped_by_max_tokens() -> None:
    plan = plan_output(random.Random(1), OutputLengthConfig(dist="fixed", value=50), 10, False,
                       VOCAB, EOS)
    assert len(plan.token_ids) == 10 and plan.finish_reason == "length"
    assert EOS not in plan.token_ids


def test_min_tokens_keeps_eos_away_until_that_many_were_generated() -> None:
    one = OutputLengthConfig(dist="fixed", value=1)
    # 6 tokens before EOS may come: EOS is the 7th
    plan = plan_output(random.Random(1), one, 100, False, VOCAB, EOS, min_tokens=6)
    assert len(plan.token_ids) == 7 and plan.finish_reason == "stop"
    assert plan.token_ids[-1] == EOS and EOS not in plan.token_ids[:-1]
    # a longer draw is kept; max_tokens still cuts
    longer = plan_output(random.Random(1), OutputLengthConfig(dist="fixed", value=20), 100,
                         False, VOCAB, EOS, min_tokens=6)
    assert len(longer.token_ids) == 20
    capped = plan_output(random.Random(1), one, 6, False, VOCAB, EOS, min_tokens=6)
    assert len(capped.token_ids) == 6 and capped.finish_reason == "length"
    assert len(plan_output(random.Random(1), one, 9, False, VOCAB, EOS, min_tokens=0)
               .token_ids) == 1


def test_tokens_follow_the_vocabulary_cyclically() -> None:
    plan = plan_output(random.Random(3), OutputLengthConfig(dist="fixed", value=9), 9, True,
                       VOCAB, EOS)
    start = VOCAB.index(plan.token_ids[0])
    assert plan.token_ids == tuple(VOCAB[(start + i) % 3] for i in range(9))


def test_distributions_stay_in_their_ranges() -> None:
    rng = random.Random(0)
    uniform = [draw_length(rng, OutputLengthConfig(dist="uniform", min=3, max=5))
               for _ in range(200)]
    assert set(uniform) == {3, 4, 5}
    lognormal = [draw_length(rng, OutputLengthConfig(dist="lognormal", mean=100, sigma=0.5))
                 for _ in range(4000)]
    assert min(lognormal) >= 1
    assert 90 <= sum(lognormal) / len(lognormal) <= 110
