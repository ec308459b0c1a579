"""bench/cases.py: choosing a benchmark's cases by key."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from bench.cases import chosen_cases


@dataclass(frozen=True)
class Case:
    key: str


CASES = (Case("chat"), Case("completions"), Case("embeddings"))


def test_the_cases_named_in_their_order() -> None:
    assert chosen_cases(" embeddings, chat ,", CASES) == [Case("embeddings"), Case("chat")]


@pytest.mark.parametrize(("spec", "said"), [
    ("chat,nope,nada", "unknown case(s) nope, nada; choose from chat, completions, embeddings"),
    (" , ", "unknown case(s) (none); choose from chat, completions, embeddings"),
])
def test_unknown_or_no_keys_are_refused_with_the_known_ones(spec: str, said: str) -> None:
    with pytest.raises(ValueError) as refused:
        chosen_cases(spec, CASES)
    assert str(refused.value) == said
