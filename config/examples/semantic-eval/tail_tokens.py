"""How many of the window's wordpieces should come from a long prompt's end?
``semantic.tail_tokens`` swept on the labelled development files.

For each value, the example file's model is built as the router builds it
(``build_semantic_model``: its fine-tuned encoder, its classifier trained on its examples, its
digit feature) with ``tail_tokens`` set, each labelled text is cut as the router cuts a request
(``clean_text`` with the section's head and tail characters), embedded by that model and scored
as the router answers (below the threshold: the default class). ``0`` is the window as it was,
the first 62 wordpieces. ``long`` counts the texts of each file that are longer than the window,
the only ones the setting changes. The example file took 31 from this table without blind10,
which was derived after it and scored once with the example file (``blind10/example-file.txt``);
its column was added after, so no number here is blind.

Run from the repository root (the tuned encoder is cached by ``kvroute semantic train``)::

    .venv/bin/python config/examples/semantic-eval/tail_tokens.py --tails 0,8,16,24,31,40
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from variants import routed_accuracy  # noqa: E402

from policies.loader import load_routing  # noqa: E402
from policies.semantic.embedder_limits import SPECIAL_TOKENS  # noqa: E402
from policies.semantic.model import build_semantic_model, read_labelled_rows  # noqa: E402
from policies.semantic.section import SECTION_NAME, SemanticSection  # noqa: E402
from policies.semantic.text import clean_text  # noqa: E402

ROUTING = HERE.parent / "semantic.yaml"
FILES = ("heldout", "blind", "blind-reviewed", "blind2", "blind3", "blind4", "blind5",
         "blind6", "blind7", "blind8", "blind9", "blind10")


def tail_list(text: str) -> tuple[int, ...]:
    try:
        tails = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not tails:
        raise argparse.ArgumentTypeError("no value given")
    return tails


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n")[:2]))
    parser.add_argument("--tails", type=tail_list, default=(0, 8, 16, 24, 31, 40),
                        help="comma-separated tail_tokens values (default %(default)s)")
    args = parser.parse_args()
    routing = load_routing(ROUTING).section(SECTION_NAME)
    assert isinstance(routing, SemanticSection), f"{ROUTING}: no semantic section"
    rows = {name: read_labelled_rows(HERE / f"{name}.jsonl", name) for name in FILES}
    print(f"{'tail':>4s} " + " ".join(f"{name[-8:]:>8s}" for name in FILES) + f" {'mean':>6s}",
          flush=True)
    long_counts: list[int] | None = None
    for tail in args.tails:
        section = dataclasses.replace(routing, tail_tokens=tail)
        model = build_semantic_model(section, ROUTING.parent)
        try:
            scores = []
            texts = {name: [clean_text(row.text, section.max_chars, section.tail_chars)
                            for row in rows[name]] for name in FILES}
            for name in FILES:
                truth = [row.label for row in rows[name]]
                scores.append(routed_accuracy(model.classifier, model.embed_inputs(texts[name]),
                                              truth, section))
            if long_counts is None:       # counted once, on the texts of the first value
                window = section.max_tokens - SPECIAL_TOKENS
                count_tokens = model.embedder.count_tokens  # type: ignore[attr-defined]
                long_counts = [sum(count_tokens(text) - SPECIAL_TOKENS > window
                                   for text in texts[name]) for name in FILES]
        finally:
            model.close()
        print(f"{tail:4d} " + " ".join(f"{100 * s:7.1f}%" for s in scores)
              + f" {100 * np.mean(scores):5.1f}%", flush=True)
    if long_counts is not None:
        print(f"{'long':>4s} " + " ".join(f"{n:8d}" for n in long_counts)
              + f" {sum(long_counts):6d}")
        print(f"{'rows':>4s} " + " ".join(f"{len(rows[name]):8d}" for name in FILES)
              + f" {sum(len(r) for r in rows.values()):6d}")


if __name__ == "__main__":
    main()
