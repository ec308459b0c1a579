"""revise_examples.py's rounds: each replacement takes its old example's place, and undoing
the rounds gives back the example file before them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[4]
EVAL_DIR = ROOT / "config/examples/semantic-eval"


@pytest.fixture(scope="module")
def revise() -> ModuleType:
    sys.path.insert(0, str(EVAL_DIR))       # the script imports its neighbour variants.py
    try:
        spec = importlib.util.spec_from_file_location("semantic_eval_revise_examples",
                                                      EVAL_DIR / "revise_examples.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EVAL_DIR))
    return module


@pytest.fixture(scope="module")
def example_file(revise: ModuleType) -> object:
    from policies.loader import load_routing
    from policies.semantic.section import SECTION_NAME

    return load_routing(revise.ROUTING).section(SECTION_NAME)


def examples(section: object) -> dict[str, tuple[str, ...]]:
    return {name: spec.examples for name, spec in section.classes.items()}  # type: ignore[attr-defined]


def test_before_the_first_round_the_file_has_every_old_example_and_its_threshold(
        revise: ModuleType, example_file: object) -> None:
    before = revise.before_round(example_file, 1)
    assert before.threshold == 0.3
    every = examples(before)
    for round_ in revise.ROUNDS:
        for change in round_.replacements:
            assert change.new not in every[change.label], change.new
    for change in revise.ROUNDS[0].replacements:
        assert change.old in every[change.label], change.old
    assert {name: len(texts) for name, texts in every.items()} == {
        name: len(texts) for name, texts in examples(example_file).items()}


@pytest.mark.parametrize("number", [1, 2])
def test_each_replacement_takes_its_old_examples_place(
        revise: ModuleType, example_file: object, number: int) -> None:
    round_ = revise.ROUNDS[number - 1]
    before = revise.before_round(example_file, number)
    assert before.threshold == round_.threshold_before
    old = examples(before)
    for position, change in enumerate(round_.replacements, start=1):
        after = examples(revise.replaced(before, round_.replacements, (position,)))
        index = old[change.label].index(change.old)
        assert after[change.label][index] == change.new
        assert after[change.label][:index] == old[change.label][:index]
        assert after[change.label][index + 1:] == old[change.label][index + 1:]
        assert {name: texts for name, texts in after.items() if name != change.label} == {
            name: texts for name, texts in old.items() if name != change.label}


def test_the_example_file_is_the_first_round_applied_whole(
        revise: ModuleType, example_file: object) -> None:
    first = revise.ROUNDS[0]
    everything = tuple(range(1, len(first.replacements) + 1))
    applied = revise.replaced(revise.before_round(example_file, 1), first.replacements,
                              everything)
    assert examples(applied) == examples(revise.before_round(example_file, 2))


def test_a_replacement_whose_old_and_new_texts_are_both_missing_is_refused(
        revise: ModuleType, example_file: object) -> None:
    stray = revise.Replacement("chat", "an example no file has", "another one")
    with pytest.raises(SystemExit, match="replacement 1: the chat examples have neither"):
        revise.replaced(example_file, (stray,), (1,))
