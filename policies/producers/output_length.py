"""``output-length`` producer: how many tokens a request is expected to generate.

Clients rarely send their answer's length: most send a generous ``max_tokens``, or none. The
time and cost estimates, the decode guard and the KV check all need the output length, and
taking ``max_tokens`` (or 256 without it) for it can be wrong by a hundred times: a code
completion capped at 4,096 tokens that answers in 30. This producer learns from the requests
that finished (``on_completed``: the completion tokens the worker reported) and sets
``request.predicted_output_tokens``:

* with ``max_tokens``: the typical share of its ``max_tokens`` that such requests used
  (the geometric mean of their shares), times this request's ``max_tokens``; clients that
  send their answer's length get it back, since each of their shares is 1;
* without: the typical output of such requests (the geometric mean of their outputs).

A ``max_tokens`` that reaches past what the prompt leaves of the largest context window of
the model's workers limits nothing (vLLM clamps it to the window, as it sets no
``max_tokens`` at all, up to ``max_model_len``; past that it answers 400): such a request is
predicted and teaches as one without, so a client asking for far more than the window
leaves neither learns a share of that (which made every other client's share tiny) nor is
predicted past the window; no prediction passes it.

A geometric mean rather than an arithmetic one: output lengths spread over orders of
magnitude (on Azure's code trace the mean is twice the median), and what the estimates
decide on is the typical request's, above all the decode guard, which asks how much stall
a request can absorb before its TPOT misses: a mean that long answers pull up gives the many
short ones slack they do not have.

"Such requests" are those of the same tenant and model once ``min_samples`` of them finished,
else those of the model, else none: the field stays None and the estimates take
``max_tokens`` (or the scorers' ``default_output_tokens``) as before. Means are running means
over the first ``window`` outcomes, then exponentially weighted with weight ``1 / window``,
so they follow a workload that changes. At most ``max_tenants`` (tenant, model) pairs are
kept, the least recently finished forgotten first. Only successful requests (status 200)
that generated at least one token teach it.

**A conversation's previous turn** (``previous_turn``, on by default): a prompt that continues
an earlier one (its block hashes hold that prompt's; ``policies.producers.previous_turns``)
is predicted that turn's answer length, capped at its ``max_tokens``, once that has been the
nearer of the two on ``min_samples`` such requests of the model (each finished continuation
scores both: |ln(generated / predicted)|, running means over ``window``; the other being the
typical share or output above, else ``max_tokens``, else 256). Clients that send their
answer's length are never predicted less: the other way is exact for them. Without
``block_hashes`` (no prefix plugin asks for them) nothing changes.

```yaml
producers:
  - type: output-length
    params: {min_samples: 20, window: 200, max_tenants: 10000, previous_turn: true,
             turns_remembered: 200000}
```
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from policies.base import (
    RequestOutcome,
    RoutingRequest,
    output_tokens_in_window,
    per_sequence,
)
from policies.errors import ParamError
from policies.producers.previous_turns import PreviousTurns
from policies.registry import PluginRegistry
from workers.models import WorkerView

TYPE_NAME = "output-length"


@dataclass(frozen=True, slots=True)
class OutputLengthParams:
    min_samples: int = 20      # outcomes before a mean is used
    window: int = 200          # outcomes a mean weighs equally before it starts forgetting
    max_tenants: int = 10_000  # (tenant, model) pairs remembered
    previous_turn: bool = True      # a conversation's next answer from its previous one
    turns_remembered: int = 200_000   # block hashes kept for that (about 170 bytes each)

    def __post_init__(self) -> None:
        if self.min_samples < 1:
            raise ParamError("min_samples", "must be >= 1")
        if self.window < 1:
            raise ParamError("window", "must be >= 1")
        if self.max_tenants < 0:
            raise ParamError("max_tenants", "must be >= 0")
        if self.turns_remembered < 0:
            raise ParamError("turns_remembered", "must be >= 0")


class RunningMean:
    """The mean of the first ``window`` values, then an exponentially weighted one."""

    __slots__ = ("count", "value")

    def __init__(self) -> None:
        self.count = 0
        self.value = 0.0

    def add(self, x: float, window: int) -> None:
        self.count += 1
        self.value += (x - self.value) / (self.count if self.count < window else window)


class OutputStats:
    """What the finished requests of one tenant or model generated, as means of logarithms
    (``exp`` of one is a geometric mean)."""

    __slots__ = ("log_share_of_cap", "log_uncapped_tokens")

    def __init__(self) -> None:
        self.log_share_of_cap = RunningMean()     # ln(completion / max_tokens), with a cap
        self.log_uncapped_tokens = RunningMean()  # ln(completion tokens), without

    def predict(self, max_tokens: int | None, min_samples: int) -> int | None:
        if max_tokens is not None:
            share = self.log_share_of_cap
            if share.count < min_samples:
                return None
            # a share of 1 (ln 0.0) gives max_tokens exactly: exp(0.0) is 1.0
            return min(max_tokens, max(1, round(math.exp(share.value) * max_tokens)))
        tokens = self.log_uncapped_tokens
        if tokens.count < min_samples:
            return None
        return max(1, round(math.exp(tokens.value)))

    def learn(self, max_tokens: int | None, completion_tokens: int, window: int) -> None:
        if max_tokens is not None and max_tokens > 0:
            share = completion_tokens / max_tokens
            self.log_share_of_cap.add(math.log(share) if share < 1.0 else 0.0, window)
        else:
            self.log_uncapped_tokens.add(math.log(completion_tokens), window)


class TurnJudgement:
    """How near a model's previous-turn predictions came, against the other way's."""

    __slots__ = ("other_error", "turn_error")

    def __init__(self) -> None:
        self.turn_error = RunningMean()     # |ln(generated / previous turn's answer)|
        self.other_error = RunningMean()    # |ln(generated / what was predicted otherwise)|

    def turn_is_nearer(self, min_samples: int) -> bool:
        return (self.turn_error.count >= min_samples
                and self.turn_error.value < self.other_error.value)


TURN_KEY = "output_length.turn"   # request.attributes: (previous turn's, the other) prediction
CAP_KEY = "output_length.cap"     # request.attributes: its max_tokens if it limits, else None


def largest_window(model: str, workers: Sequence[WorkerView]) -> int:
    """The longest context window of the workers serving ``model`` (0: none known)."""
    return max((view.max_model_len for view in workers if view.serves(model)), default=0)


def within_a_window(model: str, workers: Sequence[WorkerView], tokens: int) -> bool:
    """Whether some worker serving ``model`` has a window longer than ``tokens`` (True when
    none is known). Stops at the first: on a large fleet a request costs a scan of every
    view only when it asks past every window."""
    known = False
    for view in workers:
        window = view.max_model_len
        if window > 0 and view.serves(model):
            if window > tokens:
                return True
            known = True
    return not known


class OutputLengthProducer:
    """Sets ``request.predicted_output_tokens`` from what similar requests generated."""

    def __init__(self, name: str, params: OutputLengthParams) -> None:
        self.name = name
        self.params = params
        self._by_tenant: OrderedDict[tuple[str, str], OutputStats] = OrderedDict()
        self._by_model: dict[str, OutputStats] = {}
        self._turns = (PreviousTurns(params.turns_remembered) if params.previous_turn
                       else None)
        self._judgements: dict[str, TurnJudgement] = {}    # by model

    def produce(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> None:
        least, context = self.params.min_samples, request.context_prompt_tokens
        max_tokens = request.max_tokens
        if max_tokens is not None and not within_a_window(request.model, workers,
                                                          context + max_tokens):
            max_tokens = None          # past the window: no limit (vLLM's clamp is its own)
        request.attributes[CAP_KEY] = max_tokens
        predicted = None
        if request.tenant is not None:
            stats = self._by_tenant.get((request.tenant, request.model))
            if stats is not None:
                predicted = stats.predict(max_tokens, least)
        if predicted is None:
            pooled = self._by_model.get(request.model)
            if pooled is not None:
                predicted = pooled.predict(max_tokens, least)
        if self._turns is not None and request.block_hashes:
            answer = self._turns.answer_before(request.block_hashes[min(request.block_hashes)])
            if answer is not None:
                turn = answer if max_tokens is None or answer < max_tokens else max_tokens
                request.attributes[TURN_KEY] = (
                    turn, predicted if predicted is not None else request.output_tokens_bound)
                judgement = self._judgements.get(request.model)
                if judgement is not None and judgement.turn_is_nearer(least):
                    predicted = turn
        if (predicted is not None and max_tokens is None     # (with one: within it)
                and not within_a_window(request.model, workers, context + predicted - 1)):
            predicted = output_tokens_in_window(predicted, context,
                                                largest_window(request.model, workers))
        if (predicted is not None and request.max_tokens is not None
                and predicted > request.max_tokens):
            predicted = request.max_tokens
        request.predicted_output_tokens = predicted

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        if outcome.status != 200 or outcome.completion_tokens < 1:
            return
        # what one sequence generated: a batch's prompts and n choices report their sum
        window, tokens = self.params.window, per_sequence(outcome.completion_tokens, request)
        if self._turns is not None and request.block_hashes:
            self._turns.remember(request.block_hashes[min(request.block_hashes)], tokens)
            self._judge(request, tokens, window)
        pooled = self._by_model.get(request.model)
        if pooled is None:
            pooled = self._by_model[request.model] = OutputStats()
        cap = request.attributes.get(CAP_KEY, request.max_tokens)
        pooled.learn(cap, tokens, window)
        if request.tenant is None or self.params.max_tenants == 0:
            return
        key = (request.tenant, request.model)
        stats = self._by_tenant.get(key)
        if stats is None:
            stats = self._by_tenant[key] = OutputStats()
            if len(self._by_tenant) > self.params.max_tenants:
                self._by_tenant.popitem(last=False)
        else:
            self._by_tenant.move_to_end(key)
        stats.learn(cap, tokens, window)

    def _judge(self, request: RoutingRequest, tokens: int, window: int) -> None:
        """Score both predictions a continuation had on what it generated."""
        predictions: tuple[int, int] | None = request.attributes.get(TURN_KEY)
        if predictions is None:
            return
        turn, other = predictions
        judgement = self._judgements.get(request.model)
        if judgement is None:
            judgement = self._judgements[request.model] = TurnJudgement()
        judgement.turn_error.add(abs(math.log(tokens / turn)), window)
        judgement.other_error.add(abs(math.log(tokens / other)), window)

    def turn_judgements(self) -> Iterator[tuple[str, float, float, int]]:
        """(model, mean error of the previous turn's answer, of the other prediction,
        continuations judged) for each model with a judged continuation: the running means of
        |ln(generated / predicted)| that decide which is used."""
        for model, judgement in self._judgements.items():
            yield (model, judgement.turn_error.value, judgement.other_error.value,
                   judgement.turn_error.count)

    def forget_model(self, model: str) -> None:
        """No worker serves ``model`` any more (an adapter unloaded everywhere): what was
        learnt of it goes."""
        self._by_model.pop(model, None)
        self._judgements.pop(model, None)
        for key in [key for key in self._by_tenant if key[1] == model]:
            del self._by_tenant[key]

    def inherit_state(self, previous: object) -> None:
        """Keep what the engine this one replaces has learnt (a hot reload)."""
        if isinstance(previous, OutputLengthProducer):
            self._by_tenant = previous._by_tenant
            self._by_model = previous._by_model
            while len(self._by_tenant) > self.params.max_tenants:
                self._by_tenant.popitem(last=False)
            self._judgements = previous._judgements
            if self._turns is not None and previous._turns is not None:
                previous._turns.capacity = self._turns.capacity
                self._turns = previous._turns


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "producer", OutputLengthParams,
                      lambda params, ctx: OutputLengthProducer(ctx.name, params),
                      provides=("predicted_output_tokens",), uses=("block_hashes",))
