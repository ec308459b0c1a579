"""``kvroute semantic eval`` and ``train``: a routing file's classifier, measured or prepared.

    kvroute semantic eval --routing config/examples/semantic.yaml \
        --data config/examples/semantic-eval/heldout.jsonl
    kvroute semantic train --routing config/examples/semantic.yaml

``eval``: ``--data`` is JSONL with ``text`` and ``label`` per line (several files: each is
reported in turn, then their accuracies side by side with their mean). Prints both classifiers'
scores (cross-validated on the examples, and on the data), the accuracy of the one the file
uses, its confusion matrix and each class's precision and recall; ``--errors N`` lists up to
N prompts it got wrong, ``--by FIELD`` the accuracy per value of a field of the data's rows
(a source, say: where the classifier fails), ``--thresholds`` the accuracy at other
confidence thresholds, ``--json FILE`` writes all of it. ``train``
builds the classifier as the router would, which fine-tunes the encoder when the file sets
``fine_tune`` and its result is not cached yet, and prints the weights file the encoder uses
(tuned, or mixed with the base model: ``fine_tune.mix``) and
the training report.
Both draw a progress bar while fine-tuning. Exit code 0, or 2 for a bad routing or data file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from policies.semantic.evaluation import FileScore, Matrix
    from policies.semantic.model import LabelledRow, SemanticModel
    from policies.semantic.section import SemanticSection

# what begins each command's error line, as other commands name themselves (``kvroute sim:``)
TRAIN_PREFIX = "kvroute semantic train"
EVAL_PREFIX = "kvroute semantic eval"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("semantic", help="semantic routing tools")
    commands = parser.add_subparsers(dest="semantic_command", metavar="SUBCOMMAND")
    evaluate = commands.add_parser(
        "eval", help="accuracy and confusion matrix of a routing file's semantic classifier")
    evaluate.add_argument("--routing", required=True, help="routing.yaml with a semantic: section")
    evaluate.add_argument("--data", required=True, nargs="+", metavar="FILE",
                          help="JSONL of {\"text\", \"label\"}; several files are each "
                               "reported, then their accuracies side by side with the mean")
    evaluate.add_argument("--errors", type=int, default=0, metavar="N",
                          help="also list up to N misclassified prompts, by true class, the "
                               "most confident first (default: %(default)s)")
    evaluate.add_argument("--by", default=None, metavar="FIELD",
                          help="also print the accuracy per value of FIELD of the data's rows "
                               "(e.g. source), the least accurate first")
    evaluate.add_argument("--thresholds", type=threshold_list, default=(), metavar="T,T,...",
                          help="also print the accuracy the chosen classifier would have at "
                               "these confidence thresholds (e.g. 0.3,0.5,0.7)")
    evaluate.add_argument("--json", type=Path, default=None, metavar="FILE",
                          help="also write the whole report, every misclassified prompt "
                               "included, as JSON to FILE")
    evaluate.set_defaults(func=run_eval)
    train = commands.add_parser(
        "train", help="fine-tune the encoder (when the file asks for it) and train the "
                      "classifier now, so that the router starts from the cache")
    train.add_argument("--routing", required=True, help="routing.yaml with a semantic: section")
    train.set_defaults(func=run_train)
    parser.set_defaults(func=lambda args: _usage(parser))


def run_train(args: argparse.Namespace) -> int:
    from policies.errors import RoutingConfigError

    try:
        section, base_dir = _section(args.routing)
        model = _build(section, base_dir)
    except RoutingConfigError as exc:
        print(f"{TRAIN_PREFIX}: {exc}", file=sys.stderr)
        return 2
    try:
        weights, tuning = model.embedder_weights, section.fine_tune
        if weights is None or tuning is None:
            print("encoder: not fine-tuned")
        else:
            print(f"encoder: fine-tuned, mixed {tuning.mix:g} with the base model, {weights}"
                  if tuning.mix < 1.0 else f"encoder: fine-tuned, {weights}")
        print(f"training: {model.report.summary()}")
    finally:
        model.close()
    return 0


def _section(routing_path: str) -> tuple[SemanticSection, Path]:
    """(the semantic section of a routing file, the file's folder); ``RoutingConfigError``."""
    from policies.errors import RoutingConfigError
    from policies.loader import load_routing
    from policies.semantic.section import SECTION_NAME, SemanticSection

    section = load_routing(routing_path).section(SECTION_NAME)
    if not isinstance(section, SemanticSection):
        raise RoutingConfigError(f"{routing_path}: has no '{SECTION_NAME}:' section")
    return section, Path(routing_path).resolve().parent


def _build(section: SemanticSection, base_dir: Path) -> SemanticModel:
    """The trained model, with a progress bar while the encoder is fine-tuned."""
    from policies.semantic.model import build_semantic_model

    with progress_bar("fine-tuning the encoder") as progress:
        return build_semantic_model(section, base_dir, progress)


def run_eval(args: argparse.Namespace) -> int:
    from policies.errors import RoutingConfigError
    from policies.semantic.evaluation import format_summary, mean_accuracy
    from policies.semantic.model import load_examples, read_labelled_rows

    if args.errors < 0:
        print(f"{EVAL_PREFIX}: --errors must be >= 0", file=sys.stderr)
        return 2
    problem = json_problem(args.json)     # before the model is built (minutes when it trains)
    if problem:
        print(f"{EVAL_PREFIX}: {problem}", file=sys.stderr)
        return 2
    several = len(args.data) > 1
    try:
        section, base_dir = _section(args.routing)
        data = [(path, read_labelled_rows(Path(path), "--data"))
                for path in args.data]
        empty = [path for path, rows in data if not rows]
        if empty:                  # before the model is built: nothing to score there
            raise RoutingConfigError(f"--data: {empty[0]} has no labelled prompt (rows "
                                     "{\"text\": ..., \"label\": ...})")
        for path, rows in data:    # before the model is built (minutes when it trains)
            if args.by is not None and all(args.by not in row.fields for row in rows):
                # (a typo grouped every row as "(none)")
                raise RoutingConfigError(f"--by: no row of {path} has the field {args.by!r}")
            stray = next((row for row in rows if row.label not in section.labels), None)
            if stray is not None:
                raise RoutingConfigError(
                    f"--data: {path}: line {stray.line}: label {stray.label!r} is not among "
                    f"the classes ({', '.join(section.labels)})")
        model = _build(section, base_dir)
    except RoutingConfigError as exc:
        print(f"{EVAL_PREFIX}: {exc}", file=sys.stderr)
        return 2
    reports: list[dict[str, Any]] = []
    summary: list[FileScore] = []
    try:
        texts, labels = load_examples(section, base_dir)
        example_vectors = model.embed_inputs(texts)
        for path, rows in data:
            try:
                score, one = _evaluate_file(args, section, model, example_vectors, labels,
                                            path, rows, several)
            except ValueError as exc:
                print(f"{EVAL_PREFIX}: {path}: {exc}", file=sys.stderr)
                return 2
            summary.append(score)
            reports.append(one)
    finally:
        model.close()
    if several:
        print(format_summary(summary, model.report.chosen, args.thresholds))
    if args.json is not None:
        try:
            files = [{"data": score.path, **file_report}
                     for score, file_report in zip(summary, reports, strict=True)]
            report = reports[0] if not several else {"files": files,
                                                     "mean_accuracy": mean_accuracy(summary)}
            args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        except OSError as exc:
            print(f"{EVAL_PREFIX}: --json: {exc}", file=sys.stderr)
            return 2
    return 0


def json_problem(path: Path | None) -> str | None:
    """``--json: ...`` when the report could not be written to ``path`` (a folder, a folder
    that does not exist, or one not writable), else None: found before the evaluation, whose
    encoder may train for minutes, and not after it."""
    if path is None:
        return None
    if path.is_dir():
        return f"--json: {path} is a folder; give a file's name"
    folder = path.parent
    if not folder.is_dir():
        what = "not a folder" if folder.exists() else "no such folder"
        return f"--json: cannot write {path}: {folder}: {what}"
    # an existing file is written in place (its folder may be read-only); a new one made
    writable = (os.access(path, os.W_OK) if path.exists()
                else os.access(folder, os.W_OK | os.X_OK))
    if not writable:
        return f"--json: cannot write {path}: Permission denied"
    return None


def _evaluate_file(args: argparse.Namespace, section: SemanticSection, model: SemanticModel,
                   example_vectors: Matrix, labels: list[str], path: str,
                   rows: list[LabelledRow], several: bool) -> tuple[FileScore, dict[str, Any]]:
    """Score one data file, print its report (and its threshold table when asked), and return
    its score and JSON report; ``ValueError`` for labels that are not classes."""
    from policies.semantic.evaluation import (
        FileScore,
        at_thresholds,
        evaluate,
        format_result,
        format_thresholds,
        result_json,
    )
    from policies.semantic.model import field_text
    from policies.semantic.text import clean_text

    cleaned = [clean_text(row.text, section.max_chars, section.tail_chars) for row in rows]
    result = evaluate(section, model.report, example_vectors, labels,
                      model.embed_inputs(cleaned),
                      [row.label for row in rows])
    texts = [row.text for row in rows]
    lines = [row.line for row in rows]
    group_field = args.by or "group"
    groups = None if args.by is None else [field_text(row, args.by) for row in rows]
    if several:
        print(f"== {path}")
    print(format_result(result, texts, args.errors, groups=groups, group_field=group_field,
                        lines=lines))
    swept = at_thresholds(result, args.thresholds, section.default_class)
    if swept:
        print(format_thresholds(swept, result.chosen, section.default_class))
    report = result_json(result, texts, groups, group_field, lines)
    if swept:
        report["thresholds"] = [{"threshold": row.threshold, "accuracy": row.accuracy,
                                 "unsure": row.unsure} for row in swept]
    return FileScore.of(path, result, swept), report


def threshold_list(text: str) -> tuple[float, ...]:
    """``--thresholds``: comma-separated probabilities in [0, 1]."""
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of numbers: {text!r}") from None
    if not all(0.0 <= value <= 1.0 for value in values):
        raise argparse.ArgumentTypeError(f"thresholds are probabilities in [0, 1]: {text!r}")
    return values


@contextlib.contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int], None]]:
    """A ``(done, total)`` callback drawing a bar on stderr from its first call (fine-tuning
    reports progress only when it trains, not when its result is cached)."""
    bars: list[Any] = []

    def update(done: int, total: int) -> None:
        if not bars:
            from tqdm import tqdm

            bars.append(tqdm(total=total, unit="step", desc=description, file=sys.stderr,
                             dynamic_ncols=True, mininterval=1.0))
        bars[0].update(done - bars[0].n)

    try:
        yield update
    finally:
        for bar in bars:
            bar.close()


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2
