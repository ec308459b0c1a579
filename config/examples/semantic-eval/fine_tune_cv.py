"""What fine-tuning the encoder on 20 examples per class buys, cross-validated.

Pools every labelled file of this folder (as ``ceiling.py`` does) and runs a stratified
5-fold cross-validation. In each fold, 20 random rows per class of the training folds are the
examples (as a routing file may hold at most 20 per class), and the router's logistic regression
(``C=LOGREG_C``) is fitted on them twice and scored on the held-out fold:

* ``frozen``: the base all-MiniLM-L6-v2 embeddings;
* ``fine-tuned``: the embeddings after ``policies.semantic.fine_tune`` trained the encoder on
  those examples (``--pairs-per-example`` rounds, the other parameters at their defaults), the
  tuned encoder itself (``mix: 1.0``);
* ``mix M``: for each other value of ``--mixes``, the encoder ``M`` of the way from the base
  model to that tuned one (the same training).

``--pick kmeans`` takes instead the rows nearest 20 k-means centroids of each class (on the
frozen embeddings), as ``ceiling.py``'s ``kmeans20`` does.

Both embed as the example configuration does (ONNX Runtime int8, first ``--max-tokens``
tokens). Tuned weights and their ONNX exports go to a temporary cache. Run from the
repository root (about five minutes of training per fold on two cores)::

    .venv/bin/python config/examples/semantic-eval/fine_tune_cv.py --pairs-per-example 20
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ceiling import PER_CLASS, kmeans_rows, load_rows  # noqa: E402

if TYPE_CHECKING:
    from policies.semantic.fine_tune import FineTuneParams


def tuned_embeddings(texts: list[str], labels: npt.NDArray[np.str_], picked: list[int],
                     params: FineTuneParams, max_tokens: int,
                     description: str) -> npt.NDArray[np.float32]:
    """Every text embedded as the example file does (ONNX Runtime int8, the first
    ``max_tokens`` tokens) by the encoder fine-tuned on the ``picked`` rows, with a progress
    bar while it trains (the weights land in ``$KVROUTE_CACHE_DIR``)."""
    from policies.semantic.cli import progress_bar
    from policies.semantic.embedder import MiniLmEmbedder
    from policies.semantic.fine_tune import fine_tuned_weights
    from policies.semantic.model import embed_all

    with progress_bar(description) as progress:
        weights = fine_tuned_weights([texts[i] for i in picked],
                                     [str(labels[i]) for i in picked], params, max_tokens,
                                     progress=progress)
    return embed_all(MiniLmEmbedder(max_tokens=max_tokens, quantize=True, runtime="onnx",
                                    weights=weights), texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--pairs-per-example", type=int, default=20)
    parser.add_argument("--folds", type=int, default=5, help="folds run (of 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mixes", default="1.0",
                        help="comma-separated fine_tune.mix values to score (1.0: the tuned "
                             "encoder, reported as fine-tuned; default %(default)s)")
    parser.add_argument("--pick", choices=("random", "kmeans"), default="random",
                        help="examples per class: random rows, or the rows nearest 20 k-means "
                             "centroids of the class (frozen embeddings), as ceiling.py does")
    args = parser.parse_args()
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    from policies.semantic.classifier import LOGREG_C
    from policies.semantic.embedder import MiniLmEmbedder
    from policies.semantic.fine_tune import FineTuneParams
    from policies.semantic.model import embed_all

    rows = load_rows()
    texts = [row["text"] for row in rows]
    labels = np.array([row["label"] for row in rows])
    mixes = [float(m) for m in str(args.mixes).split(",") if m.strip()]
    params = FineTuneParams(pairs_per_example=args.pairs_per_example, mix=1.0)
    print(f"{len(rows)} labelled prompts; {PER_CLASS} {args.pick} examples per class; {params}")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["KVROUTE_CACHE_DIR"] = cache
        frozen = embed_all(MiniLmEmbedder(max_tokens=args.max_tokens, quantize=True,
                                          runtime="onnx"), texts)
        rng = np.random.default_rng(args.seed)
        names = {mix: "fine-tuned" if mix == 1.0 else f"mix {mix:g}" for mix in mixes}
        scores: dict[str, list[float]] = {"frozen": [], **{name: [] for name in names.values()}}
        folds = StratifiedKFold(5, shuffle=True, random_state=args.seed)
        for fold, (train, test) in enumerate(folds.split(frozen, labels)):
            if fold >= args.folds:
                break
            picked: list[int] = []
            for label in sorted(set(labels.tolist())):
                candidates = train[labels[train] == label]
                count = min(PER_CLASS, len(candidates))
                picked += (kmeans_rows(frozen, candidates, count) if args.pick == "kmeans" else
                           [int(i) for i in rng.choice(candidates, count, replace=False)])
            embedded = [("frozen", frozen)] + [
                (names[mix], tuned_embeddings(texts, labels, picked,
                                              dataclasses.replace(params, mix=mix),
                                              args.max_tokens, f"fold {fold + 1}: fine-tuning"))
                for mix in mixes]
            for name, vectors in embedded:
                model = LogisticRegression(C=LOGREG_C, max_iter=2000).fit(vectors[picked],
                                                                          labels[picked])
                scores[name].append(float((model.predict(vectors[test]) == labels[test]).mean()))
            print(f"fold {fold + 1}: " + ", ".join(
                f"{name} {100 * values[-1]:.1f}%" for name, values in scores.items()), flush=True)
    print(f"max_tokens {args.max_tokens}, pairs_per_example {args.pairs_per_example}: "
          f"{len(scores['frozen'])}-fold mean accuracy " + ", ".join(
              f"{name} {100 * float(np.mean(values)):.1f}%" for name, values in scores.items()))


if __name__ == "__main__":
    main()
