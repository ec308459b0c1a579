"""Would the end of a long prompt help? The example file's classifier on head + tail windows.

An exploration, not a setting: the router embeds the first ``max_tokens`` (64) wordpieces of a
text, and a word problem puts its question last. Here each text longer than the window (62
wordpieces between the special tokens) is cut to its first ``head`` and last ``tail``
wordpieces (the first 4,096 characters tokenized), decoded back to text and embedded as the
router would; the examples (short: none is cut) and every labelled file, the example file's
encoder and classifier (logistic regression, C = 10, its threshold), with and without its
digit feature. ``tail 0`` is the router as it is. Every file here has been scored before, so
none of this is a blind number.

Run from the repository root::

    .venv/bin/python config/examples/semantic-eval/head_tail.py
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from variants import routed_accuracy  # noqa: E402

from policies.loader import load_routing  # noqa: E402
from policies.semantic.classifier import fit  # noqa: E402
from policies.semantic.embedder import model_directory  # noqa: E402
from policies.semantic.model import (  # noqa: E402
    build_semantic_model,
    embed_all,
    load_examples,
    read_labelled_rows,
)
from policies.semantic.section import SECTION_NAME, SemanticSection  # noqa: E402
from policies.semantic.surface import classifier_inputs  # noqa: E402

ROUTING = HERE.parent / "semantic.yaml"
FILES = ("heldout", "blind", "blind-reviewed", "blind2", "blind3", "blind4", "blind5",
         "blind6", "blind7", "blind8", "blind9")
WINDOW = 62               # wordpieces between [CLS] and [SEP] at max_tokens 64
TOKENIZED_CHARS = 4096
SPLITS = ((WINDOW, 0), (46, 16), (31, 31))
WEIGHTS = (0.0, 4.0)


def cutter(tokenizer: Any, head: int, tail: int, max_chars: int) -> Callable[[str], str]:
    """The text the embedder gets: as the router cuts it (``tail`` 0), or head + tail."""
    def cut(text: str) -> str:
        if tail == 0:
            return text[:max_chars]
        ids = tokenizer(text[:TOKENIZED_CHARS], add_special_tokens=False)["input_ids"]
        if len(ids) <= WINDOW:
            return text[:TOKENIZED_CHARS]
        return f"{tokenizer.decode(ids[:head])} ... {tokenizer.decode(ids[-tail:])}"
    return cut


def main() -> None:
    section = load_routing(ROUTING).section(SECTION_NAME)
    assert isinstance(section, SemanticSection), f"{ROUTING}: no semantic section"
    # the digit weights and the windows are applied below
    section = dataclasses.replace(section, digit_weight=0.0, tail_tokens=0)
    texts, labels = load_examples(section, ROUTING.parent)
    model = build_semantic_model(section, ROUTING.parent)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_directory()), local_files_only=True)
    rows = {name: read_labelled_rows(HERE / f"{name}.jsonl", name) for name in FILES}
    print(f"{'head':>4s} {'tail':>4s} {'digits':>6s} " + " ".join(f"{n[-8:]:>8s}" for n in FILES)
          + f" {'mean':>6s}", flush=True)
    try:
        for head, tail in SPLITS:
            cut = cutter(tokenizer, head, tail, section.max_chars)
            examples = [cut(text) for text in texts]
            example_vectors = embed_all(model.embedder, examples)
            cut_files = {name: [cut(row.text) for row in rows[name]] for name in FILES}
            vectors = {name: embed_all(model.embedder, cut_files[name]) for name in FILES}
            for weight in WEIGHTS:
                classifier = fit("logistic-regression",
                                 classifier_inputs(example_vectors, examples, weight), labels)
                scores = [routed_accuracy(
                    classifier, classifier_inputs(vectors[name], cut_files[name], weight),
                    [row.label for row in rows[name]], section) for name in FILES]
                print(f"{head:4d} {tail:4d} {weight:6g} "
                      + " ".join(f"{100 * s:7.1f}%" for s in scores)
                      + f" {100 * np.mean(scores):5.1f}%", flush=True)
    finally:
        model.close()


if __name__ == "__main__":
    main()
