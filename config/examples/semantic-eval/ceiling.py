"""How far a linear classifier on all-MiniLM-L6-v2 embeddings can go on the labelled prompts.

Pools every labelled file of this folder (pool, heldout, blind-reviewed, blind2), embeds the
prompts as the example configuration does (ONNX Runtime int8, first ``--max-tokens`` model
tokens), and runs a stratified 5-fold cross-validation of three training sets drawn from
the training folds only:

* ``all``: every training row (hundreds per class): the ceiling of the approach here;
* ``kmeans20``: 20 rows per class, the row nearest each of 20 k-means centroids of that
  class (a principled way to write "at most 20 examples per class" from a labelled pool);
* ``random20``: 20 random rows per class.

The same logistic regression (``C=10``) is fitted on each and scored on the held-out fold.
Run from the repository root::

    .venv/bin/python config/examples/semantic-eval/ceiling.py --max-tokens 64 256
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
FILES = ("pool.jsonl", "heldout.jsonl", "blind-reviewed.jsonl", "blind2.jsonl")
PER_CLASS = 20


def load_rows() -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for name in FILES:
        with (HERE / name).open() as handle:
            rows.extend(json.loads(line) for line in handle if line.strip())
    return rows


def kmeans_rows(vectors: npt.NDArray[np.float32], rows: npt.NDArray[np.int64],
                count: int) -> list[int]:
    from sklearn.cluster import KMeans

    fitted = KMeans(count, n_init=3, random_state=0).fit(vectors[rows])
    return [int(rows[np.argmax(vectors[rows] @ centre)]) for centre in fitted.cluster_centers_]


def cross_validate(vectors: npt.NDArray[np.float32], labels: npt.NDArray[np.str_],
                   seed: int = 0) -> dict[str, float]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    rng = np.random.default_rng(seed)
    scores: dict[str, list[float]] = {"all": [], "kmeans20": [], "random20": []}
    folds = StratifiedKFold(5, shuffle=True, random_state=seed)
    for train, test in folds.split(vectors, labels):
        chosen: dict[str, list[int]] = {"all": [int(i) for i in train], "kmeans20": [],
                                        "random20": []}
        for label in sorted(set(labels.tolist())):
            rows = train[labels[train] == label]
            count = min(PER_CLASS, len(rows))
            chosen["kmeans20"] += kmeans_rows(vectors, rows, count)
            chosen["random20"] += [int(i) for i in rng.choice(rows, count, replace=False)]
        for name, picked in chosen.items():
            model = LogisticRegression(C=10.0, max_iter=2000).fit(vectors[picked],
                                                                  labels[picked])
            scores[name].append(float((model.predict(vectors[test]) == labels[test]).mean()))
    return {name: float(np.mean(values)) for name, values in scores.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[64])
    args = parser.parse_args()
    from policies.semantic.embedder import MiniLmEmbedder

    rows = load_rows()
    labels = np.array([row["label"] for row in rows])
    counts = {label: int((labels == label).sum()) for label in sorted(set(labels.tolist()))}
    print(f"{len(rows)} labelled prompts: {counts}")
    for max_tokens in args.max_tokens:
        embedder = MiniLmEmbedder(max_tokens=max_tokens, quantize=True, runtime="onnx")
        texts = [row["text"] for row in rows]
        vectors = np.vstack([embedder.embed(texts[i:i + 32]) for i in range(0, len(texts), 32)])
        result = cross_validate(vectors, labels)
        print(f"max_tokens {max_tokens}: 5-fold accuracy " + ", ".join(
            f"{name} {100 * value:.1f}%" for name, value in result.items()))


if __name__ == "__main__":
    main()
