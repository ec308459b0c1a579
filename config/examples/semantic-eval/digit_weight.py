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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from labelled_file import Encoded  # noqa: E402
from variants import routed_accuracy  # noqa: E402

from policies.loader import load_routing  # noqa: E402
from policies.semantic.classifier import fit  # noqa: E402
from policies.semantic.embedder import MiniLmEmbedder  # noqa: E402
from policies.semantic.model import (  # noqa: E402
    build_semantic_model,
    load_examples,
)
from policies.semantic.section import SECTION_NAME, SemanticSection  # noqa: E402
from policies.semantic.surface import classifier_inputs  # noqa: E402

ROUTING = HERE.parent / "semantic.yaml"
FILES = ("heldout", "blind", "blind-reviewed", "blind2", "blind3", "blind4", "blind5",
         "blind6", "blind7", "blind8", "blind9")


def accuracies(encoded: Encoded, weight: float) -> dict[str, float]:
    """Each file's accuracy with the classifier fitted on the examples at ``weight``."""
    classifier = fit("logistic-regression",
                     classifier_inputs(encoded.examples, encoded.example_texts, weight),
                     encoded.example_labels)
    return {name: routed_accuracy(classifier,
                                  classifier_inputs(vectors, encoded.texts[name], weight),
                                  encoded.labels[name], encoded.section)
            for name, vectors in encoded.vectors.items()}


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
    # the encoder is the same whatever the weight; the weight is applied below, and the
    # window is a text's start, as when this was measured
    section = dataclasses.replace(section, digit_weight=0.0, tail_tokens=0)
    examples = load_examples(section, ROUTING.parent)
    model = build_semantic_model(section, ROUTING.parent)
    frozen = MiniLmEmbedder(max_tokens=section.max_tokens, threads=section.threads,
                            quantize=section.quantize,
                            runtime="onnx" if section.runtime == "onnx" else "torch")
    try:
        encoders = {"mixed": Encoded(model.embedder, section, FILES, examples),
                    "frozen": Encoded(frozen, section, FILES, examples)}
    finally:
        model.close()
    print(f"{'encoder':7s} {'weight':>6s} " + " ".join(f"{n[-8:]:>8s}" for n in FILES)
          + f" {'blind5-8':>8s} {'mean':>6s}")
    for label, encoded in encoders.items():
        for weight in args.weights:
            scores = accuracies(encoded, weight)
            never = np.mean([scores[n] for n in ("blind5", "blind6", "blind7", "blind8")])
            print(f"{label:7s} {weight:6g} " + " ".join(f"{100 * scores[n]:7.1f}%" for n in FILES)
                  + f" {100 * never:7.1f}% {100 * np.mean(list(scores.values())):5.1f}%")


if __name__ == "__main__":
    main()
