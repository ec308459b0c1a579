"""Draw the example file's utterances: 20 random labelled prompts per class, best of a few draws.

``fine_tune_cv.py`` showed that 20 random prompts per class, drawn from every source, with the
encoder fine-tuned on them, classify held-out prompts of those sources about as well as any
choice of 20 does (89.7-91.7 % over three cross-validations). This script draws such examples
for the example file: for each ``--seeds`` value it draws 20 rows per class from
``ceiling.py``'s labelled files (pool, heldout, blind-reviewed, blind2), fine-tunes the encoder
on them (the example file's ``fine_tune: {}``), fits the router's logistic regression on their
embeddings and scores it on every other row of those files (``blind3.jsonl`` is never read).
The draw that scores best is printed as the ``classes:`` block of
``config/examples/semantic.yaml``.

Measured on ``blind3.jsonl``, the best of four draws (91.5 % on the other labelled rows)
scored 85.7 %, below the hand-written examples' 88.7 %, so the example file keeps those
(docs/semantic-accuracy.md, "Third blind set").

Each drawn text is written as the encoder reads it: whitespace runs become one space (the
tokenizer splits on whitespace alike) and text beyond the first ``--max-tokens`` word pieces,
which the encoder never sees, is cut at the next word end. Run from the repository root
(about five minutes per draw on two cores)::

    .venv/bin/python config/examples/semantic-eval/draw_examples.py --seeds 0 1 2 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ceiling import PER_CLASS, load_rows  # noqa: E402
from fine_tune_cv import tuned_embeddings  # noqa: E402

CLASS_ORDER = ("code", "math", "support", "chat")    # the example file's order


def encoder_text(text: str, tokenizer: Any, max_tokens: int) -> str:
    """``text`` with single spaces, cut after the word that holds its ``max_tokens``-th
    word piece (the encoder reads fewer: its window counts two special tokens)."""
    flat = " ".join(text.split())
    offsets = tokenizer(flat, add_special_tokens=False, return_offsets_mapping=True,
                        truncation=False)["offset_mapping"]
    if len(offsets) <= max_tokens:
        return flat
    end = offsets[max_tokens - 1][1]
    space = flat.find(" ", end)
    return flat if space < 0 else flat[:space]


def draw(labels: npt.NDArray[np.str_], seed: int) -> list[int]:
    """``PER_CLASS`` random row numbers per class, in ``CLASS_ORDER``."""
    rng = np.random.default_rng(seed)
    picked: list[int] = []
    for label in CLASS_ORDER:
        candidates = np.flatnonzero(labels == label)
        picked += [int(i) for i in rng.choice(candidates, PER_CLASS, replace=False)]
    return picked


def yaml_block(texts: list[str], labels: list[str]) -> str:
    lines = ["  classes:"]
    for label in CLASS_ORDER:
        lines += [f"    {label}:", "      examples:"]
        lines += [f"        - {json.dumps(text, ensure_ascii=False)}"
                  for text, of in zip(texts, labels, strict=True) if of == label]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3],
                        help="one draw per seed (default 0 1 2 3)")
    parser.add_argument("--max-tokens", type=int, default=64,
                        help="the example file's max_tokens (default 64)")
    parser.add_argument("--report", type=Path, help="also write each draw's scores as JSON")
    args = parser.parse_args()
    from sklearn.linear_model import LogisticRegression

    from policies.semantic.classifier import LOGREG_C
    from policies.semantic.embedder import MiniLmEmbedder
    from policies.semantic.fine_tune import FineTuneParams

    rows = load_rows()
    tokenizer = MiniLmEmbedder(max_tokens=args.max_tokens)._tokenizer
    texts = [encoder_text(row["text"], tokenizer, args.max_tokens) for row in rows]
    labels = np.array([row["label"] for row in rows])
    params = FineTuneParams(mix=1.0)     # the tuned encoder itself, as measured (no mix)
    print(f"{len(rows)} labelled prompts; {PER_CLASS} random examples per class; {params}")
    report: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["KVROUTE_CACHE_DIR"] = cache
        for seed in args.seeds:
            picked = draw(labels, seed)
            rest = np.setdiff1d(np.arange(len(rows)), picked)
            vectors = tuned_embeddings(texts, labels, picked, params, args.max_tokens,
                                       f"seed {seed}: fine-tuning")
            model = LogisticRegression(C=LOGREG_C, max_iter=2000).fit(vectors[picked],
                                                                      labels[picked])
            right = model.predict(vectors[rest]) == labels[rest]
            recall = {label: float(right[labels[rest] == label].mean()) for label in CLASS_ORDER}
            report.append({"seed": seed, "accuracy": float(right.mean()), "recall": recall,
                           "examples": [rows[i]["source"] + ":" + rows[i]["id"]
                                        for i in picked]})
            print(f"seed {seed}: accuracy {100 * right.mean():.1f}% on {len(rest)} rows ("
                  + ", ".join(f"{k} {100 * v:.0f}%" for k, v in recall.items()) + ")",
                  flush=True)
    best = max(report, key=lambda entry: entry["accuracy"])
    if args.report:
        args.report.write_text(json.dumps({"best_seed": best["seed"], "draws": report},
                                          indent=2) + "\n")
    picked = draw(labels, best["seed"])
    print(f"best: seed {best['seed']} ({100 * best['accuracy']:.1f}%)")
    print(yaml_block([texts[i] for i in picked], [str(labels[i]) for i in picked]))


if __name__ == "__main__":
    main()
