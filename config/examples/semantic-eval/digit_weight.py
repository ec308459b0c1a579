"""How much should the digit feature count? ``semantic.digit_weight`` swept on the labelled files.

The example file's encoder (tuned on its examples, mixed with the base model's weights) and the
frozen all-MiniLM-L6-v2 embed the examples and every labelled development file once; then, for
each weight, the example file's classifier (logistic regression, C = 10) is fitted on the
examples with the digit feature appended (``policies.semantic.surface``) and each file is
scored as the router would answer (below the threshold: the default class; blind9 was
derived after the example file took its weight, 4, from this table without it). Weight 0 is the
classifier without the feature, the example file's before the feature existed.

Run from the repository root (the tuned encoder is cached by ``kvroute semantic train``)::

    .venv/bin/python config/examples/semantic-eval/digit_weight.py --weights 0,1,2,3,4,5,6,8,16
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from variants import routed_accuracy  # noqa: E402

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
from policies.semantic.surface import classifier_inputs  # noqa: E402
from policies.semantic.text import clean_text  # noqa: E402

ROUTING = HERE.parent / "semantic.yaml"
FILES = ("heldout", "blind", "blind-reviewed", "blind2", "blind3", "blind4", "blind5",
         "blind6", "blind7", "blind8", "blind9")
Matrix = npt.NDArray[np.float32]


class Embedded:
    """One encoder's embeddings of the examples and of each file, with their texts."""

    def __init__(self, embedder: Embedder, section: SemanticSection, files: tuple[str, ...],
                 examples: tuple[list[str], list[str]]) -> None:
        self.section = section
        self.texts = {"": examples[0]}
        self.labels = {"": examples[1]}
        for name in files:
            rows = read_labelled_rows(HERE / f"{name}.jsonl", name)
            self.texts[name] = [clean_text(row.text, section.max_chars) for row in rows]
            self.labels[name] = [row.label for row in rows]
        self.vectors = {name: embed_all(embedder, texts) for name, texts in self.texts.items()}

    def accuracies(self, weight: float) -> dict[str, float]:
        """Each file's accuracy with the classifier fitted at ``weight``."""
        inputs = {name: classifier_inputs(vectors, self.texts[name], weight)
                  for name, vectors in self.vectors.items()}
        classifier = fit("logistic-regression", inputs[""], self.labels[""])
        return {name: routed_accuracy(classifier, inputs[name], self.labels[name], self.section)
                for name in self.texts if name}


def weight_list(text: str) -> tuple[float, ...]:
    try:
        weights = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"weights are numbers: {text!r}") from None
    if not weights or any(not 0 <= w <= 100 for w in weights):
        raise argparse.ArgumentTypeError(f"weights are numbers within 0..100: {text!r}")
    return weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--weights", type=weight_list, default=(0.0, 2.0, 4.0, 8.0),
                        help="comma-separated digit weights (default 0,2,4,8)")
    args = parser.parse_args()
    section = load_routing(ROUTING).section(SECTION_NAME)
    assert isinstance(section, SemanticSection), f"{ROUTING}: no semantic section"
    # the encoder is the same whatever the weight; the weight is applied below
    section = dataclasses.replace(section, digit_weight=0.0)
    examples = load_examples(section, ROUTING.parent)
    model = build_semantic_model(section, ROUTING.parent)
    frozen = MiniLmEmbedder(max_tokens=section.max_tokens, threads=section.threads,
                            quantize=section.quantize,
                            runtime="onnx" if section.runtime == "onnx" else "torch")
    try:
        encoders = {"mixed": Embedded(model.embedder, section, FILES, examples),
                    "frozen": Embedded(frozen, section, FILES, examples)}
    finally:
        model.close()
    print(f"{'encoder':7s} {'weight':>6s} " + " ".join(f"{n[-8:]:>8s}" for n in FILES)
          + f" {'blind5-8':>8s} {'mean':>6s}")
    for label, embedded in encoders.items():
        for weight in args.weights:
            scores = embedded.accuracies(weight)
            never = np.mean([scores[n] for n in ("blind5", "blind6", "blind7", "blind8")])
            print(f"{label:7s} {weight:6g} " + " ".join(f"{100 * scores[n]:7.1f}%" for n in FILES)
                  + f" {100 * never:7.1f}% {100 * np.mean(list(scores.values())):5.1f}%")


if __name__ == "__main__":
    main()
