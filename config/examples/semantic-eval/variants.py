"""Two changes to the example file's classifier, scored on every labelled file of this folder.

The example file's errors on the blind sets are mostly prompts far from every example of
one class that the fine-tuned encoder still places confidently in it (chat puzzles taken
for math). Two cheap answers to that, each against the example file as it is:

* ``gate``: a prompt whose predicted class is not the default one goes to the default class
  when the frozen encoder finds no example of that class as close to it as the class's own
  examples are to each other (the least, over the class's examples, of each one's
  similarity to its nearest other example): an open-set gate, its bounds set from the
  examples alone;
* ``ensemble``: the mean of the fine-tuned classifier's probabilities and those of the same
  logistic regression fitted on the frozen encoder's embeddings of the examples; twice the
  encoder passes per prompt.

Every file is seen: this compares the changes, it does not measure them on never-seen
prompts. Run from the repository root (the tuned encoder is cached by ``kvroute semantic
train``; writes the table to stdout)::

    .venv/bin/python config/examples/semantic-eval/variants.py
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from policies.loader import load_routing  # noqa: E402
from policies.semantic.classifier import LinearClassifier, fit  # noqa: E402
from policies.semantic.embedder import MiniLmEmbedder  # noqa: E402
from policies.semantic.model import (  # noqa: E402
    build_semantic_model,
    embed_all,
    load_examples,
    read_labelled_rows,
)
from policies.semantic.section import SECTION_NAME, SemanticSection  # noqa: E402
from policies.semantic.text import clean_text  # noqa: E402

ROUTING = HERE.parent / "semantic.yaml"
FILES = ("heldout", "blind", "blind-reviewed", "blind2", "blind3", "blind4", "blind5", "blind6")
Matrix = npt.NDArray[np.float32]


def unit(vectors: Matrix) -> Matrix:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-9)
    scaled: Matrix = (vectors / norms).astype(np.float32)
    return scaled


def gate_bounds(examples: Matrix, labels: npt.NDArray[np.str_]) -> dict[str, float]:
    """Per class, the least similarity of one of its examples to its nearest other one."""
    bounds: dict[str, float] = {}
    for label in sorted(set(labels.tolist())):
        members = examples[labels == label]
        similarity = members @ members.T
        np.fill_diagonal(similarity, -1.0)
        bounds[label] = float(similarity.max(axis=1).min())
    return bounds


def routed_accuracy(classifier: LinearClassifier, inputs: Matrix, truth: list[str],
                    section: SemanticSection) -> float:
    """``classifier``'s accuracy on ``inputs`` as the router answers: below the section's
    threshold, its default class."""
    probabilities = classifier.probabilities(inputs)
    predicted = np.where(probabilities.max(axis=1) >= section.threshold,
                         np.array(classifier.labels)[probabilities.argmax(axis=1)],
                         section.default_class)
    return float((predicted == np.array(truth)).mean())


def tuned_itself(section: SemanticSection) -> SemanticSection:
    """The section with the tuned encoder itself (``mix: 1.0``), no digit feature and the
    window at the start of a text: what this script measured, before the example file mixed
    the encoder with the base model, added the feature and read the end of long texts."""
    section = dataclasses.replace(section, digit_weight=0.0, tail_tokens=0)
    if section.fine_tune is None:
        return section
    return dataclasses.replace(section, fine_tune=dataclasses.replace(section.fine_tune,
                                                                      mix=1.0))


def main() -> None:
    section = load_routing(ROUTING).section(SECTION_NAME)
    assert isinstance(section, SemanticSection), f"{ROUTING}: no semantic section"
    section = tuned_itself(section)
    base_dir = ROUTING.parent
    model = build_semantic_model(section, base_dir)
    frozen = MiniLmEmbedder(max_tokens=section.max_tokens, threads=section.threads,
                            quantize=section.quantize,
                            runtime="onnx" if section.runtime == "onnx" else "torch")
    texts, example_labels = load_examples(section, base_dir)
    labels = np.array(example_labels)
    frozen_examples = unit(embed_all(frozen, texts))
    frozen_classifier = fit("logistic-regression", frozen_examples, example_labels)
    bounds = gate_bounds(frozen_examples, labels)
    classes = np.array(model.classifier.labels)
    default = section.default_class
    print("gate bounds (frozen cosine): "
          + ", ".join(f"{label} {bound:.2f}" for label, bound in bounds.items()))
    print(f"{'file':16s} {'prompts':>7s} {'example file':>12s} {'gate':>6s} {'ensemble':>8s}")
    totals = np.zeros(3)
    for name in FILES:
        rows = read_labelled_rows(HERE / f"{name}.jsonl", name)
        prompts = [clean_text(row.text, section.max_chars) for row in rows]
        truth = np.array([row.label for row in rows])
        tuned = model.classifier.probabilities(embed_all(model.embedder, prompts))
        plain = unit(embed_all(frozen, prompts))
        predicted = classes[tuned.argmax(axis=1)]
        gated = predicted.copy()
        similarity = plain @ frozen_examples.T
        for i, label in enumerate(predicted):
            if label != default and similarity[i, labels == label].max() < bounds[label]:
                gated[i] = default
        mixed = classes[(tuned + frozen_classifier.probabilities(plain)).argmax(axis=1)]
        scores = np.array([(p == truth).mean() for p in (predicted, gated, mixed)]) * 100
        totals += scores
        print(f"{name:16s} {len(rows):7d} {scores[0]:11.1f}% {scores[1]:5.1f}% "
              f"{scores[2]:7.1f}%")
    means = totals / len(FILES)
    print(f"{'mean':16s} {'':7s} {means[0]:11.1f}% {means[1]:5.1f}% {means[2]:7.1f}%")
    model.close()


if __name__ == "__main__":
    main()
