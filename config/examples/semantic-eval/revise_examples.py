"""Six examples rewritten after blind10's and blind11's errors, each scored on the thirteen
labelled files that were scored before blind12, and the confidence threshold with them.

blind10 and blind11 showed four kinds of prompt the example file misses: database requests
in words (code, taken for math or chat), a customer telling a support desk about a booking or
an account at length (support, taken for chat), terse, lower-case search queries (chat, taken
for code), and questions about one's own money (chat, taken for support). ``REPLACEMENTS``
are six examples written by hand for those kinds, none copied from a labelled file, each in
place of an example of its class that another one already stands for, so that every class
keeps its 20 examples.

Each replacement is scored alone, against the example file as it is; ``--combine`` scores
the file with the replacements given together. Each model is built as the router builds it
(``build_semantic_model``: the encoder fine-tuned on the changed examples, cached by their
digest; about four minutes on two cores for a new set of examples), every labelled text is
cut as the router cuts a request, and the accuracy is read as the router answers: below the
threshold, the default class. Each line gives the accuracy per file at the threshold of the
file before (0.3), then the mean of the thirteen files at each of ``THRESHOLDS``.

The rule, written before blind12 was scored: keep the replacements that raise the mean alone
(at the example file's threshold, 0.3); score them together; take the threshold with the best
mean for that file (the lower on a tie). blind12 is not read here.

Run from the repository root (writes the table to stdout)::

    .venv/bin/python config/examples/semantic-eval/revise_examples.py
    .venv/bin/python config/examples/semantic-eval/revise_examples.py --only --combine 1,2,3
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from variants import routed_accuracy  # noqa: E402

from policies.loader import load_routing  # noqa: E402
from policies.semantic.model import build_semantic_model, read_labelled_rows  # noqa: E402
from policies.semantic.section import SECTION_NAME, ClassSpec, SemanticSection  # noqa: E402
from policies.semantic.text import clean_text  # noqa: E402

ROUTING = HERE.parent / "semantic.yaml"
FILES = ("heldout", "blind", "blind-reviewed", "blind2", "blind3", "blind4", "blind5",
         "blind6", "blind7", "blind8", "blind9", "blind10", "blind11")
THRESHOLDS = (0.3, 0.35, 0.4, 0.45, 0.5)
THRESHOLD_BEFORE = 0.3      # the example file's threshold before this script


class Replacement(NamedTuple):
    label: str
    old: str      # the example it replaces, as the example file had it before this script
    new: str


REPLACEMENTS = (
    Replacement(
        "code",
        "Complete this function: def is_leap(year): ''' Given a year, return True if it is a "
        "leap year in the Gregorian calendar. '''",
        "From the orders table, list each customer's id and total spending for last month, "
        "highest first."),
    Replacement(
        "code",
        "Write a function that returns the k-th smallest element of a list of integers without "
        "sorting the whole list.",
        "Remove every row of the sessions table whose last_seen date is more than 30 days old."),
    Replacement(
        "support",
        "help me seeing in what situations can I ask for refunds",
        "I booked a flight from Denver to Boston for next Friday and need to move it to "
        "Saturday and add a checked bag. Can you do that for me?"),
    Replacement(
        "support",
        "i want help checking how soon can i expect my parcel",
        "Hi! I have a checking and a savings account with you, and last week a card payment was "
        "taken twice from my checking account. I'd like the duplicate charge refunded and to "
        "know how long that takes."),
    Replacement(
        "chat",
        "Provide insights into the correlation between economic indicators such as GDP, "
        "inflation, and unemployment rates.",
        "when did the last ice age end"),
    Replacement(
        "chat",
        "Why might someone prefer to shop at a small, locally-owned business instead of a large "
        "chain store, even if the prices are higher?",
        "I have three credit cards with different interest rates. Which should I pay off first, "
        "and is a consolidation loan a good idea?"),
)


def replaced(section: SemanticSection, chosen: tuple[int, ...]) -> SemanticSection:
    """``section`` with the replacements numbered ``chosen`` (from 1), each in its old
    example's place; the old examples must be there."""
    classes = {name: list(spec.examples) for name, spec in section.classes.items()}
    for number in chosen:
        change = REPLACEMENTS[number - 1]
        examples = classes[change.label]
        if change.old in examples:
            examples[examples.index(change.old)] = change.new
        elif change.new not in examples:
            raise SystemExit(f"replacement {number}: the {change.label} examples have neither "
                             f"its old nor its new text")
    return dataclasses.replace(section, classes={
        name: ClassSpec(tuple(examples)) for name, examples in classes.items()})


def original(section: SemanticSection) -> SemanticSection:
    """``section`` with every replacement undone and its threshold as it was: the example
    file before this script."""
    classes = {name: list(spec.examples) for name, spec in section.classes.items()}
    for change in REPLACEMENTS:
        examples = classes[change.label]
        if change.new in examples:
            examples[examples.index(change.new)] = change.old
    return dataclasses.replace(section, threshold=THRESHOLD_BEFORE, classes={
        name: ClassSpec(tuple(examples)) for name, examples in classes.items()})


def numbers(text: str) -> tuple[int, ...]:
    try:
        chosen = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not chosen or not all(1 <= n <= len(REPLACEMENTS) for n in chosen):
        raise argparse.ArgumentTypeError(f"give numbers within 1..{len(REPLACEMENTS)}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n")[:2]))
    parser.add_argument("--combine", type=numbers, action="append", default=[],
                        help="also score these replacements together (e.g. 1,2,5); repeatable")
    parser.add_argument("--only", action="store_true",
                        help="score only the --combine sets (not the file and each one alone)")
    args = parser.parse_args()
    routing = load_routing(ROUTING).section(SECTION_NAME)
    assert isinstance(routing, SemanticSection), f"{ROUTING}: no semantic section"
    before = original(routing)
    variants: list[tuple[str, tuple[int, ...]]] = []
    if not args.only:
        variants.append(("file before", ()))
        variants.extend((f"only {n}", (n,)) for n in range(1, len(REPLACEMENTS) + 1))
    variants.extend(("+".join(map(str, chosen)), chosen) for chosen in args.combine)
    for number, change in enumerate(REPLACEMENTS, start=1):
        print(f"{number}: {change.label}: {change.new!r}")
    rows = {name: read_labelled_rows(HERE / f"{name}.jsonl", name) for name in FILES}
    print(f"per file at the threshold of the file before, {before.threshold}")
    print(f"{'variant':>11s} " + " ".join(f"{name[-8:]:>8s}" for name in FILES) + " "
          + " ".join(f"{'mean@' + format(t, '.2f'):>10s}" for t in THRESHOLDS), flush=True)
    for title, chosen in variants:
        section = replaced(before, chosen)
        model = build_semantic_model(section, ROUTING.parent)
        try:
            inputs = {name: model.embed_inputs([
                clean_text(row.text, section.max_chars, section.tail_chars)
                for row in rows[name]]) for name in FILES}
        finally:
            model.close()
        per_threshold = [[routed_accuracy(model.classifier, inputs[name],
                                          [row.label for row in rows[name]],
                                          dataclasses.replace(section, threshold=threshold))
                          for name in FILES] for threshold in THRESHOLDS]
        at_file = per_threshold[THRESHOLDS.index(section.threshold)]
        print(f"{title:>11s} " + " ".join(f"{100 * s:7.1f}%" for s in at_file) + " "
              + " ".join(f"{100 * np.mean(s):9.2f}%" for s in per_threshold), flush=True)


if __name__ == "__main__":
    main()
