"""The output-length producer: expected output tokens learnt from finished requests."""

from __future__ import annotations

import dataclasses
import math

import pytest

from policies.base import RequestOutcome, RoutingRequest
from policies.errors import ParamError
from policies.producers.output_length import (
    TURN_KEY,
    OutputLengthParams,
    OutputLengthProducer,
    RunningMean,
)
from tests.policies.peers.peer_fixtures import make_view
from workers.models import WorkerView


def request(n: int, max_tokens: int | None, tenant: str | None = None,
            model: str = "m", blocks: list[int] | None = None) -> RoutingRequest:
    routed = RoutingRequest(request_id=f"r{n}", model=model, max_tokens=max_tokens,
                            tenant=tenant)
    if blocks is not None:
        routed.block_hashes[16] = blocks
    return routed


def finish(producer: OutputLengthProducer, routed: RoutingRequest, tokens: int,
           status: int = 200) -> None:
    producer.on_completed(routed, RequestOutcome(request_id=routed.request_id, worker_id="w",
                                                 status=status, completion_tokens=tokens))


def predicted(producer: OutputLengthProducer, routed: RoutingRequest) -> int | None:
    producer.produce(routed, [])
    return routed.predicted_output_tokens


def geometric_mean(*values: float) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def test_nothing_is_predicted_before_min_samples_finished() -> None:
    producer = OutputLengthProducer("output-length", OutputLengthParams(min_samples=3))
    for n in range(2):
        finish(producer, request(n, 4096), 40)
    assert predicted(producer, request(9, 4096)) is None
    assert request(9, 4096).expected_output_tokens == 4096      # the bound, as before
    finish(producer, request(2, 4096), 320)
    # shares 40, 40 and 320 of 4096: typical share 80/4096 (geometric mean), of this cap
    assert predicted(producer, request(9, 4096)) == 80
    assert predicted(producer, request(10, 2048)) == 40
    routed = request(11, 4096)
    producer.produce(routed, [])
    assert routed.expected_output_tokens == 80
    assert routed.output_tokens_bound == 4096


def test_clients_sending_their_answers_length_get_it_back() -> None:
    producer = OutputLengthProducer("output-length", OutputLengthParams(min_samples=2))
    for n, tokens in enumerate((17, 350, 2)):
        finish(producer, request(n, tokens), tokens)
    for cap in (1, 5, 123, 100_000):
        routed = request(50, cap)
        assert predicted(producer, routed) == cap
        assert routed.expected_output_tokens == cap


def test_a_prediction_never_exceeds_max_tokens_nor_falls_below_one() -> None:
    producer = OutputLengthProducer("output-length", OutputLengthParams(min_samples=1))
    finish(producer, request(0, 100), 1)          # share 0.01
    assert predicted(producer, request(1, 10)) == 1
    finish(producer, request(2, 10), 50)          # generated past its cap: counts as a share of 1
    assert predicted(producer, request(3, 1000)) == round(geometric_mean(0.01, 1.0) * 1000)
    assert predicted(producer, request(4, 1)) == 1


def test_without_max_tokens_the_typical_output_is_predicted() -> None:
    producer = OutputLengthProducer("output-length", OutputLengthParams(min_samples=2))
    finish(producer, request(0, None), 10)
    assert predicted(producer, request(1, None)) is None
    assert request(1, None).expected_output_tokens == 256
    finish(producer, request(2, None), 1000)
    routed = request(3, None)
    assert predicted(producer, routed) == 100      # not the arithmetic mean, 505
    assert routed.expected_output_tokens == 100
    assert routed.output_tokens_bound == 256
    # capped and uncapped requests are learnt apart
    assert predicted(producer, request(4, 500)) is None


def test_n_choices_and_batches_teach_what_one_sequence_generated() -> None:
    """An answer's completion_tokens is its sequences' sum: 4 choices of 25 tokens each
    taught a share of 100 of max_tokens 100 (a share of 1: every answer as long as it may
    be), and 4 prompts of a batch likewise."""
    producer = OutputLengthProducer("output-length", OutputLengthParams(min_samples=2))
    choices, batch = request(0, 100), request(1, 100)
    choices.choices = choices.returned_choices = 4
    batch.prompt_count = 4
    finish(producer, choices, 100)
    finish(producer, batch, 100)
    assert predicted(producer, request(2, 100)) == 25


def test_a_tenant_uses_its_own_numbers_once_it_has_enough() -> None:
    producer = OutputLengthProducer("output-length", OutputLengthParams(min_samples=2))
    for n in range(4):
        finish(producer, request(n, 1000, tenant="chat"), 500)
    finish(producer, request(10, 1000, tenant="code"), 10)
    # one finished request of "code": the model's pooled shares 4 x 0.5 and 0.01
    pooled = geometric_mean(0.5, 0.5, 0.5, 0.5, 0.01)
    assert predicted(producer, request(20, 1000, tenant="code")) == round(pooled * 1000)
    finish(producer, request(11, 1000, tenant="code"), 40)
    assert predicted(producer, request(21, 1000, tenant="code")) == 20
    assert predicted(producer, request(22, 1000, tenant="chat")) == 500
    pooled = geometric_mean(0.5, 0.5, 0.5, 0.5, 0.01, 0.04)
    assert predicted(producer, request(23, 1000, tenant="new")) == round(pooled * 1000)
    assert predicted(producer, request(24, 1000)) == round(pooled * 1000)
    assert predicted(producer, request(25, 1000, model="other")) is None


def test_failures_and_empty_answers_teach_nothing() -> None:
    producer = OutputLengthProducer("output-length", OutputLengthParams(min_samples=1))
    finish(producer, request(0, 100), 80, status=502)
    finish(producer, request(1, 100), 0)
    assert predicted(producer, request(2, 100)) is None
    assert predicted(producer, request(3, None)) is None


def test_the_mean_forgets_after_its_window() -> None:
    mean = RunningMean()
    for x in (10.0, 20.0, 30.0):
        mean.add(x, window=4)
    assert mean.value == pytest.approx(20.0)          # a plain mean within the window
    for _ in range(60):
        mean.add(100.0, window=4)
    # from the window's 4th value on, each new one weighs 1/4: the gap shrinks by 3/4 each
    assert mean.value == pytest.approx(100.0 - 80.0 * 0.75 ** 60)


def test_tenants_are_bounded_least_recently_finished_first() -> None:
    producer = OutputLengthProducer("output-length",
                                    OutputLengthParams(min_samples=1, max_tenants=2))
    finish(producer, request(0, 100, tenant="a"), 10)
    finish(producer, request(1, 100, tenant="b"), 20)
    finish(producer, request(2, 100, tenant="a"), 10)     # a is now the most recent
    finish(producer, request(3, 100, tenant="c"), 30)
    # b is forgotten: it gets the model's pooled share; a and c keep their own
    pooled = round(geometric_mean(0.1, 0.2, 0.1, 0.3) * 100)
    assert predicted(producer, request(4, 100, tenant="b")) == pooled != 20
    assert predicted(producer, request(5, 100, tenant="a")) == 10
    assert predicted(producer, request(6, 100, tenant="c")) == 30


def test_a_reloaded_engine_keeps_what_was_learnt() -> None:
    old = OutputLengthProducer("output-length", OutputLengthParams(min_samples=1))
    finish(old, request(0, 1000, tenant="t"), 250)
    new = OutputLengthProducer("output-length", OutputLengthParams(min_samples=1))
    new.inherit_state(old)
    assert predicted(new, request(1, 1000, tenant="t")) == 250


def opening(c: int) -> list[int]:
    """The block hashes of conversation ``c``'s first prompt (8 blocks: the 8th is kept)."""
    return [c * 100 + k for k in range(8)]


def follow_up(c: int, turn: int = 1) -> list[int]:
    """The block hashes of its next prompt: the first, then the answer and a new message."""
    return opening(c) + [c * 100 + 50 + k for k in range(turn)]


def conversation_turns(producer: OutputLengthProducer, conversations: int,
                       max_tokens: int | None, first: int = 0) -> None:
    """``conversations`` two-turn conversations: each second turn generates what its first
    did (10, 1,000, 10, 1,000, ...); both turns finish."""
    for c in range(first, first + conversations):
        answer = 10 if c % 2 == 0 else 1000
        first_turn = request(2 * c, max_tokens, blocks=opening(c))
        producer.produce(first_turn, [])
        finish(producer, first_turn, answer)
        second_turn = request(2 * c + 1, max_tokens, blocks=follow_up(c))
        producer.produce(second_turn, [])
        finish(producer, second_turn, answer)


def test_a_conversation_is_predicted_its_previous_answer_once_that_proves_nearer() -> None:
    producer = OutputLengthProducer("output-length", OutputLengthParams(min_samples=4))
    conversation_turns(producer, 3, None)        # 3 continuations judged: not yet
    third_turn = request(100, None, blocks=follow_up(1, 2))   # continues conversation 1 (1,000)
    typical = round(geometric_mean(10, 10, 1000, 1000, 10, 10))
    assert predicted(producer, third_turn) == typical == 46
    assert third_turn.attributes[TURN_KEY] == (1000, typical)
    conversation_turns(producer, 1, None, first=3)
    assert predicted(producer, request(101, None, blocks=follow_up(1, 3))) == 1000
    assert predicted(producer, request(102, None, blocks=follow_up(2, 2))) == 10
    # not a continuation: the typical output, as before (of 4 x 10 and 4 x 1,000)
    assert predicted(producer, request(103, None, blocks=opening(77))) == 100
    # a cap is kept
    assert predicted(producer, request(104, 300, blocks=follow_up(1, 2))) == 300


def test_clients_sending_their_answers_length_are_never_predicted_less() -> None:
    producer = OutputLengthProducer("output-length", OutputLengthParams(min_samples=2))
    for c in range(6):        # exact max_tokens, and second turns longer than the first
        first_turn = request(2 * c, 10, blocks=opening(c))
        producer.produce(first_turn, [])
        finish(producer, first_turn, 10)
        second_turn = request(2 * c + 1, 50, blocks=follow_up(c))
        producer.produce(second_turn, [])
        assert second_turn.predicted_output_tokens in (None, 50)
        finish(producer, second_turn, 50)
    third_turn = request(99, 700, blocks=follow_up(1, 9))     # continues the second (50)
    assert predicted(producer, third_turn) == 700
    assert third_turn.attributes[TURN_KEY] == (50, 700)


def test_previous_turns_can_be_switched_off() -> None:
    producer = OutputLengthProducer("output-length",
                                    OutputLengthParams(min_samples=1, previous_turn=False))
    conversation_turns(producer, 4, None)
    second_turn = request(100, None, blocks=follow_up(1, 2))
    assert predicted(producer, second_turn) == 100
    assert TURN_KEY not in second_turn.attributes


def test_a_reloaded_engine_keeps_the_turns_and_their_judgement() -> None:
    old = OutputLengthProducer("output-length", OutputLengthParams(min_samples=2))
    conversation_turns(old, 2, None)
    new = OutputLengthProducer("output-length", OutputLengthParams(min_samples=2))
    new.inherit_state(old)
    assert predicted(new, request(9, None, blocks=follow_up(1, 2))) == 1000


@pytest.mark.parametrize(("field", "value"), [("min_samples", 0), ("window", 0),
                                              ("max_tenants", -1), ("turns_remembered", -1)])
def test_bad_params_are_refused(field: str, value: int) -> None:
    with pytest.raises(ParamError, match=field):
        OutputLengthParams(**{field: value})


def _views(window: int) -> list[WorkerView]:
    """One worker of the model ``m`` with this context window."""
    view = make_view("w0")
    info = dataclasses.replace(view.info, models=("m",))
    return [dataclasses.replace(view, info=info, max_model_len=window)]


def test_a_max_tokens_past_the_window_is_learnt_and_predicted_as_none() -> None:
    """A max_tokens of 10**9 taught a share of a billion: 24 such requests took every other
    client's prediction for max_tokens 300 from 74 to 3, and predicted 289,015 tokens for an
    8k window."""
    producer = OutputLengthProducer("output-length", OutputLengthParams(min_samples=2))
    views = _views(8192)
    for n in range(2):                      # a client with a real limit: half of it
        routed = request(n, 300)
        routed.num_prompt_tokens = 100
        producer.produce(routed, views)
        finish(producer, routed, 150)
    for n in range(2, 26):                  # 24 that ask for far more than the window
        routed = request(n, 10**9, tenant="big-spender")
        routed.num_prompt_tokens = 100
        producer.produce(routed, views)
        finish(producer, routed, 200)
    routed = request(30, 300)
    routed.num_prompt_tokens = 100
    producer.produce(routed, views)
    assert routed.predicted_output_tokens == 150          # the share of 300, unchanged
    for cap in (10**6, None):               # both: what such requests generate, in the window
        routed = request(31, cap)
        routed.num_prompt_tokens = 8100
        producer.produce(routed, views)
        assert routed.predicted_output_tokens == 92      # 200, clamped to what 8,100 leave
        routed.num_prompt_tokens = 100
        producer.produce(routed, views)
        assert routed.predicted_output_tokens == 200
    routed = request(32, 8092)              # exactly the window's rest: no limit either
    routed.num_prompt_tokens = 100
    producer.produce(routed, views)
    assert routed.predicted_output_tokens == 200


def test_a_forgotten_model_keeps_no_statistics() -> None:
    producer = OutputLengthProducer("output-length", OutputLengthParams(min_samples=1))
    for model in ("base", "fin"):
        finish(producer, request(0, 100, tenant="acme", model=model), 50)
    producer.forget_model("fin")
    assert predicted(producer, request(1, 100, tenant="acme", model="fin")) is None
    assert predicted(producer, request(1, 100, tenant="acme", model="base")) == 50
