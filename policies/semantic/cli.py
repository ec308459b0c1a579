"""``kvroute semantic eval``: accuracy and confusion matrix of a routing file's classifier.

    kvroute semantic eval --routing config/examples/semantic.yaml \
        --data config/examples/semantic-eval/heldout.jsonl

``--data`` is JSONL with ``text`` and ``label`` per line. Prints both classifiers' scores
(cross-validated on the examples, and on the data), the accuracy of the one the file uses,
and its confusion matrix. Exit code 0, or 2 for a bad routing or data file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("semantic", help="semantic routing tools")
    commands = parser.add_subparsers(dest="semantic_command", metavar="SUBCOMMAND")
    evaluate = commands.add_parser(
        "eval", help="accuracy and confusion matrix of a routing file's semantic classifier")
    evaluate.add_argument("--routing", required=True, help="routing.yaml with a semantic: section")
    evaluate.add_argument("--data", required=True, help="JSONL of {\"text\", \"label\"}")
    evaluate.set_defaults(func=run_eval)
    parser.set_defaults(func=lambda args: _usage(parser))


def run_eval(args: argparse.Namespace) -> int:
    from policies.errors import RoutingConfigError
    from policies.loader import load_routing
    from policies.semantic.evaluation import evaluate, format_result
    from policies.semantic.model import (
        build_semantic_model,
        embed_all,
        load_examples,
        read_labelled_jsonl,
    )
    from policies.semantic.section import SECTION_NAME, SemanticSection
    from policies.semantic.text import clean_text

    try:
        routing = load_routing(args.routing)
        section = routing.section(SECTION_NAME)
        if not isinstance(section, SemanticSection):
            raise RoutingConfigError(f"{args.routing}: has no '{SECTION_NAME}:' section")
        rows = read_labelled_jsonl(Path(args.data), "--data")
        base_dir = Path(args.routing).resolve().parent
        model = build_semantic_model(section, base_dir)
    except RoutingConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        texts, labels = load_examples(section, base_dir)
        data_texts = [clean_text(text, section.max_chars) for text, _ in rows]
        result = evaluate(section, model.report, embed_all(model.embedder, texts), labels,
                          embed_all(model.embedder, data_texts), [label for _, label in rows])
    except ValueError as exc:
        print(f"error: {args.data}: {exc}", file=sys.stderr)
        return 2
    finally:
        model.close()
    print(format_result(result))
    return 0


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2
