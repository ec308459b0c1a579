"""Would a labelled file of many prompts (``examples_file:``) close the gap to 90 %?

The example file's encoder is fine-tuned on its 80 hand-written examples. Here the same
tuned encoder (and, for comparison, the frozen one) embeds every development file, and the
example file's classifier (logistic regression, C = 10, its threshold and default class) is
fitted on the examples plus labelled development files:

* **leave one file out** over the six development files (pool, heldout, blind-reviewed,
  blind2, blind3, blind4; ``blind`` is left out, being blind-reviewed with unreviewed labels):
  fitted on the examples and five files, scored on the sixth;
* **the never-seen sets**, only with ``--blind``: fitted on the examples and all six files,
  scored on blind5 and blind6, for the encoder whose leave-one-file-out mean is the higher
  (the rule is fixed here, before those two are scored).

The encoder itself is not retrained on the files: fine-tuning pairs grow with the examples,
and 1,700 rows at the example file's 20 pairs each would take over an hour on two cores.
Run from the repository root (the tuned encoder is cached by ``kvroute semantic train``)::

    .venv/bin/python config/examples/semantic-eval/labelled_file.py [--blind]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from variants import routed_accuracy, tuned_itself  # noqa: E402

from policies.loader import load_routing  # noqa: E402
from policies.semantic.classifier import fit  # noqa: E402
from policies.semantic.embedder import MiniLmEmbedder  # noqa: E402
from policies.semantic.model import (  # noqa: E402
    Embedder,
    build_semantic_model,
    embed_all,
    load_examples,
    read_labelled_rows,
)
from policies.semantic.section import SECTION_NAME, SemanticSection  # noqa: E402
from policies.semantic.text import clean_text  # noqa: E402

ROUTING = HERE.parent / "semantic.yaml"
DEVELOPMENT = ("pool", "heldout", "blind-reviewed", "blind2", "blind3", "blind4")
NEVER_SEEN = ("blind5", "blind6")
Matrix = npt.NDArray[np.float32]


class Encoded:
    """One encoder's embeddings of the examples and of every labelled file (with the texts
    embedded, cut as the router cuts them)."""

    def __init__(self, embedder: Embedder, section: SemanticSection, names: tuple[str, ...],
                 examples: tuple[list[str], list[str]]) -> None:
        self.section = section
        self.example_texts = examples[0]
        self.examples = embed_all(embedder, examples[0])
        self.example_labels = examples[1]
        self.texts: dict[str, list[str]] = {}
        self.vectors: dict[str, Matrix] = {}
        self.labels: dict[str, list[str]] = {}
        for name in names:
            rows = read_labelled_rows(HERE / f"{name}.jsonl", name)
            self.texts[name] = [clean_text(row.text, section.max_chars) for row in rows]
            self.vectors[name] = embed_all(embedder, self.texts[name])
            self.labels[name] = [row.label for row in rows]

    def accuracy(self, trained_on: tuple[str, ...], scored: str) -> float:
        """Fitted on the examples and ``trained_on``; accuracy on ``scored`` as the router
        would answer (below the threshold: the default class)."""
        vectors = np.vstack([self.examples, *(self.vectors[n] for n in trained_on)])
        labels = self.example_labels + [label for n in trained_on for label in self.labels[n]]
        classifier = fit("logistic-regression", vectors, labels)
        return routed_accuracy(classifier, self.vectors[scored], self.labels[scored],
                               self.section)

    def leave_one_out(self) -> dict[str, float]:
        return {held: self.accuracy(tuple(n for n in DEVELOPMENT if n != held), held)
                for held in DEVELOPMENT}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--blind", action="store_true",
                        help="also score blind5 and blind6 (fitted on every development file)")
    args = parser.parse_args()
    section = load_routing(ROUTING).section(SECTION_NAME)
    assert isinstance(section, SemanticSection), f"{ROUTING}: no semantic section"
    section = tuned_itself(section)
    examples = load_examples(section, ROUTING.parent)
    names = DEVELOPMENT + (NEVER_SEEN if args.blind else ())
    model = build_semantic_model(section, ROUTING.parent)
    frozen = MiniLmEmbedder(max_tokens=section.max_tokens, threads=section.threads,
                            quantize=section.quantize,
                            runtime="onnx" if section.runtime == "onnx" else "torch")
    encoders = {"tuned": Encoded(model.embedder, section, names, examples),
                "frozen": Encoded(frozen, section, names, examples)}
    print("leave one development file out (examples + the other five files):")
    print(f"{'encoder':8s} " + " ".join(f"{n:>14s}" for n in DEVELOPMENT) + f" {'mean':>6s}")
    means: dict[str, float] = {}
    for label, encoded in encoders.items():
        scores = encoded.leave_one_out()
        means[label] = float(np.mean(list(scores.values())))
        print(f"{label:8s} " + " ".join(f"{100 * scores[n]:13.1f}%" for n in DEVELOPMENT)
              + f" {100 * means[label]:5.1f}%")
    if args.blind:
        chosen = max(means, key=means.__getitem__)
        encoded = encoders[chosen]
        print(f"never seen, {chosen} encoder (the higher mean), fitted on the examples and "
              f"all six development files:")
        for name in NEVER_SEEN:
            print(f"  {name}: {100 * encoded.accuracy(DEVELOPMENT, name):.1f}% "
                  f"of {len(encoded.labels[name])}")
    model.close()


if __name__ == "__main__":
    main()
