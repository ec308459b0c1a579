"""Examples of the example file rewritten after the errors of a blind set, in rounds, each
replacement scored on the labelled files scored before the next blind set, and the confidence
threshold with them.

**Round 1** (``FIRST``, chosen on the thirteen files up to blind11, measured by blind12):
blind10 and blind11 showed four kinds of prompt the example file misses: database requests in
words (code, taken for math or chat), a customer telling a support desk about a booking or an
account at length (support, taken for chat), terse, lower-case search queries (chat, taken
for code), and questions about one's own money (chat, taken for support).

**Round 2** (``SECOND``, chosen on the fourteen files up to blind12, measured by blind13):
blind12 showed a store chain's customers asking for opening hours or the nearest store
(support, taken for chat), word problems told as a story (math, taken for chat), terse
questions of law (chat, taken for support) and writing requests on technical subjects (chat,
taken for code).

Each replacement is an example written by hand for those kinds, none copied from a labelled
file, in place of an example of its class that another one already stands for, so that every
class keeps its 20 examples. Each is scored alone, against the example file before its round;
``--combine`` scores the file with the replacements given together. Each model is built as
the router builds it (``build_semantic_model``: the encoder fine-tuned on the changed
examples, cached by their digest; about four minutes on two cores for a new set of examples),
every labelled text is cut as the router cuts a request, and the accuracy is read as the
router answers: below the threshold, the default class. Each line gives the accuracy per file
at the threshold of the file before the round, then the mean of the round's files at each of
``THRESHOLDS``.

The rule, written for each round before its blind set was scored: keep the replacements that
raise the mean alone (at the threshold of the file before the round); score them together;
take the threshold with the best mean for that file (the lower on a tie). The round's blind
set is not read here.

Run from the repository root (writes the table to stdout)::

    .venv/bin/python config/examples/semantic-eval/revise_examples.py
    .venv/bin/python config/examples/semantic-eval/revise_examples.py --only --combine 1,2,3
    .venv/bin/python config/examples/semantic-eval/revise_examples.py --round 2
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


class Replacement(NamedTuple):
    label: str
    old: str      # the example it replaces, as the example file had it before this script
    new: str


class Round(NamedTuple):
    files: tuple[str, ...]            # the labelled files it is chosen on
    threshold_before: float           # the example file's threshold before it
    replacements: tuple[Replacement, ...]


FIRST = (
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
# after blind12's errors: a store chain's customers asking for hours or the nearest store,
# word problems told as a story, terse questions of law, writing requests on technical subjects
SECOND = (
    Replacement(
        "support",
        "I have to check the shipping options, how do I do it?",
        "Is your branch by the airport open on Sunday mornings, and until what time?"),
    Replacement(
        "support",
        "help me to sign up to ur company newsletter",
        "which of your locations is nearest to union square"),
    Replacement(
        "math",
        "write for me the best rational approximation to sqrt(2 + sqrt(3))",
        "Imagine a rectangular pool 8 m long, 4 m wide and 2 m deep being filled by a hose at 40 "
        "liters per minute. How many hours will it take to fill it?"),
    Replacement(
        "chat",
        "What if the Beatles had never formed as a band?",
        "is it legal to keep a pet fox in ohio"),
    Replacement(
        "chat",
        "How would you introduce yourself as a medieval knight at a royal banquet?",
        "Write a blog post for junior developers about why code reviews matter and how to give "
        "kind, useful feedback."),
)
ROUNDS = (Round(FILES, 0.3, FIRST), Round((*FILES, "blind12"), 0.35, SECOND))


def replaced(section: SemanticSection, changes: tuple[Replacement, ...],
             chosen: tuple[int, ...]) -> SemanticSection:
    """``section`` with the ``changes`` numbered ``chosen`` (from 1), each in its old
    example's place; the old examples must be there."""
    classes = {name: list(spec.examples) for name, spec in section.classes.items()}
    for number in chosen:
        change = changes[number - 1]
        examples = classes[change.label]
        if change.old in examples:
            examples[examples.index(change.old)] = change.new
        elif change.new not in examples:
            raise SystemExit(f"replacement {number}: the {change.label} examples have neither "
                             f"its old nor its new text")
    return dataclasses.replace(section, classes={
        name: ClassSpec(tuple(examples)) for name, examples in classes.items()})


def before_round(section: SemanticSection, number: int) -> SemanticSection:
    """``section`` with the replacements of round ``number`` and of every later one undone
    (the last first) and its threshold as it was: the example file before that round."""
    classes = {name: list(spec.examples) for name, spec in section.classes.items()}
    for later in reversed(ROUNDS[number - 1:]):
        for change in later.replacements:
            examples = classes[change.label]
            if change.new in examples:
                examples[examples.index(change.new)] = change.old
    return dataclasses.replace(section, threshold=ROUNDS[number - 1].threshold_before, classes={
        name: ClassSpec(tuple(examples)) for name, examples in classes.items()})


def numbers(text: str) -> tuple[int, ...]:
    try:
        chosen = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not chosen or not all(n >= 1 for n in chosen):
        raise argparse.ArgumentTypeError("give numbers from 1")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n")[:2]))
    parser.add_argument("--combine", type=numbers, action="append", default=[],
                        help="also score these replacements together (e.g. 1,2,5); repeatable")
    parser.add_argument("--only", action="store_true",
                        help="score only the --combine sets (not the file and each one alone)")
    parser.add_argument("--round", type=int, choices=range(1, len(ROUNDS) + 1), default=1,
                        help="which round of replacements (default %(default)s)")
    args = parser.parse_args()
    this_round = ROUNDS[args.round - 1]
    changes, files = this_round.replacements, this_round.files
    if any(n > len(changes) for chosen in args.combine for n in chosen):
        parser.error(f"--combine: round {args.round} has replacements 1..{len(changes)}")
    routing = load_routing(ROUTING).section(SECTION_NAME)
    assert isinstance(routing, SemanticSection), f"{ROUTING}: no semantic section"
    before = before_round(routing, args.round)
    variants: list[tuple[str, tuple[int, ...]]] = []
    if not args.only:
        variants.append(("file before", ()))
        variants.extend((f"only {n}", (n,)) for n in range(1, len(changes) + 1))
    variants.extend(("+".join(map(str, chosen)), chosen) for chosen in args.combine)
    for number, change in enumerate(changes, start=1):
        print(f"{number}: {change.label}: {change.new!r}")
    rows = {name: read_labelled_rows(HERE / f"{name}.jsonl", name) for name in files}
    print(f"per file at the threshold of the file before, {before.threshold}")
    print(f"{'variant':>11s} " + " ".join(f"{name[-8:]:>8s}" for name in files) + " "
          + " ".join(f"{'mean@' + format(t, '.2f'):>10s}" for t in THRESHOLDS), flush=True)
    for title, chosen in variants:
        section = replaced(before, changes, chosen)
        model = build_semantic_model(section, ROUTING.parent)
        try:
            inputs = {name: model.embed_inputs([
                clean_text(row.text, section.max_chars, section.tail_chars)
                for row in rows[name]]) for name in files}
        finally:
            model.close()
        per_threshold = [[routed_accuracy(model.classifier, inputs[name],
                                          [row.label for row in rows[name]],
                                          dataclasses.replace(section, threshold=threshold))
                          for name in files] for threshold in THRESHOLDS]
        at_file = per_threshold[THRESHOLDS.index(section.threshold)]
        print(f"{title:>11s} " + " ".join(f"{100 * s:7.1f}%" for s in at_file) + " "
              + " ".join(f"{100 * np.mean(s):9.2f}%" for s in per_threshold), flush=True)


if __name__ == "__main__":
    main()
