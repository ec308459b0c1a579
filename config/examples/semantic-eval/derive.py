"""Derive the labelled semantic-routing prompts from the public prompt sets in ``shared/traces``.

Run from the repository root (it reads ``../shared/traces/prompts``)::

    .venv/bin/python config/examples/semantic-eval/derive.py

Labels of pool, heldout and blind come from each source's own categories, never from reading
the prompts (except the reviews below; ``blind2.jsonl`` is labelled by reading):

* MT-Bench (first turns) and Vicuna-Bench: ``coding`` → code, ``math`` → math,
  ``writing``/``roleplay``/``humanities`` (MT-Bench) and ``generic``/``knowledge``/``roleplay``/
  ``common-sense``/``counterfactual``/``writing`` (Vicuna) → chat; other categories are left out.
* Arena-Hard v0.1: its topic ``cluster`` names, mapped below by name only (clusters whose
  name does not clearly say code, math or general chat are left out).
* Bitext customer support: every instruction → support (sampled: see ``SUPPORT_PER_INTENT``).

Arena-Hard's clusters come from topic clustering and some prompts contradict their cluster's
name. The held-out Arena-Hard rows were read once, before any of their predictions was seen,
and those whose request plainly contradicts the cluster label were relabelled or dropped
(``HELDOUT_REVIEW``). The pool rows were not reviewed.

Every row goes to ``pool.jsonl`` or ``heldout.jsonl`` by a hash of ``source:id`` (half each),
independent of its text and label; a held-out row whose text also occurs in the pool (the
sets share a few questions) is dropped. The ``examples:`` of ``config/examples/semantic.yaml`` were
written from ``pool.jsonl`` only; ``heldout.jsonl`` is the evaluation set.

``blind.jsonl`` (``blind_rows``) was added after the example configuration was frozen: rows
that neither file uses (by ``source:id`` and by text), labelled by source category alone
and never reviewed, scored once (docs/semantic-accuracy.md). It stays as that unreviewed record;
``blind-reviewed.jsonl`` is the same rows after ``BLIND_REVIEW``, a reading of its Arena-Hard
rows by the rule of ``HELDOUT_REVIEW``, done before any per-row prediction on it was seen.

``blind2.jsonl`` (``blind2_rows``) is a second never-seen set, written before it was scored:
rows that none of pool, heldout and blind uses (by ``source:id`` and by text). Its MT-Bench,
Vicuna and Arena-Hard rows come from the categories and clusters left out above and were
labelled by reading each prompt, by the review rule of ``BLIND_REVIEW``, without any prediction
(``blind2-labels.tsv``: one line per row, ``drop`` where it fits none or two classes); its
Bitext rows (support) are the next ``BLIND2_SUPPORT_PER_INTENT`` of each intent.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROMPTS = HERE.parents[2] / ".." / "shared" / "traces" / "prompts"
SUPPORT_PER_INTENT = 8   # Bitext rows kept per intent (27 intents), before the split

MT_BENCH = {"coding": "code", "math": "math", "writing": "chat", "roleplay": "chat",
            "humanities": "chat"}
VICUNA = {"coding": "code", "math": "math", "generic": "chat", "knowledge": "chat",
          "roleplay": "chat", "common-sense": "chat", "counterfactual": "chat", "writing": "chat"}
ARENA_CODE = (
    "Advanced Matplotlib Customizations", "Advanced Regex Techniques",
    "Advanced TypeScript Concepts", "Android Development Challenges",
    "Browser Extensions Development", "C++ Code Conversion Challenge",
    "CSS Flexbox & Bootstrap Layouts", "CSV Data Manipulation in Pandas",
    "Calculating Pi in Python", "Calculating Pi with Code", "Code Deobfuscation Techniques",
    "Concurrency, Sockets, and Webhooks", "Discord Bot Development",
    "Django Models & Serializers", "Dockerizing Python Applications",
    "Fibonacci Sequence Algorithms", "Fixing Fibonacci & Factorial Code",
    "Flask Web Development Essentials", "Gradio Interfaces and Blocks",
    "JavaScript Code Manipulation Techniques", "JavaScript Fourier Transformation",
    "Kotlin Development & Techniques", "Laravel & Filament Development",
    "Linked List Operations", "Node.js & Authentication Development",
    "Optimized CUDA Matrix Multiplication", "PDF Processing in Python",
    "PHP CalDAV & SCIM Integration", "PHP, CORS, and Server Requests",
    "PyTorch Autoencoder Implementation", "Python Audio Processing", "Python Coding Challenges",
    "Python Concurrency Challenges", "Python Console Code Simulation", "Python Data Structures",
    "Python Development & Integration", "Python Looping and Counting",
    "Python Prime Number Validation", "Python Web Scraping", "RNN Implementation in VB6",
    "React Component Development", "Roblox Scripting and Mechanics",
    "Rust Fibonacci & Factorial Functions", "Rust Structs and Traits", "SQL Database Essentials",
    "Shiny App Development & Profiling", "Streamlit App Development",
    "String Reversal Techniques", "Swift Retry Management",
    "Symfony, Doctrine, CQRS/Event Sourcing", "Tailwind CSS & Next.js Development",
    "Text Processing with Awk/Sed/Grep", "Tidyverse Data Manipulation",
    "Tkinter Dynamic GUI Elements", "WPF Settings Persistence", "Basic Assembly Operations",
    "Interactive Data Visualization in Python", "Web Scraping Techniques & Tools",
    "Delete System32 with Rust", "Monads in Functional Programming",
    "Mocking Techniques and Testing",
)
ARENA_MATH = (
    "Advanced Algebra and Number Theory", "Advanced Mathematical Problem-Solving",
    "Math Problems and Solutions", "Proving Square Root Irrationality",
    "Real Analysis Continuity", "Triangle Geometry Analysis", "Dice Probability Calculations",
    "Probability Distributions & Statistics", "Train Time and Speed Problems",
    "Investment Growth Calculations", "Consecutive Draws Ball Difference",
    "Sample Size Calculation Methods", "Bulk Ticket Pricing Mathematics",
    "Money and Transaction Puzzles", "Time Calculations & Conversions",
)
ARENA_CHAT = (
    "Baking and Peanut Butter Recipes", "Healthy Meal Planning", "Endurance Race Training",
    "Marketing Strategy Essentials", "Philosophy & Theology Reviews",
    "Debate Preparation and Argumentation", "Climate Change Skepticism",
    "Startup Business Planning", "AI Startup Business Strategies",
    "Historical and Modern Housebuilding", "Medical Conditions and Procedures",
    "Expert Analysis on Preppers", "Teaching & Learning Assessment",
    "Diverse Contemporary Issues", "Exam Cheating Strategies", "Grocery Industry Disruption",
    "Agile Scrum Leadership", "Prepositions Semantic Etymology", "Lojban Language Translation",
    "Text-Based RPG Creation", "RPG Character Interactions", "Chess Strategy and Gameplay",
    "Trading Card Games", "Advanced Guitar Chord Theory", "Library Science Research Trends",
    "Hospital Design & Management", "Innovative Online Market Models",
    "SEO for Home Services", "Profitability Enhancement Strategies",
    "Product Reinvention Analysis",
)
ARENA = {**{c: "code" for c in ARENA_CODE}, **{c: "math" for c in ARENA_MATH},
         **{c: "chat" for c in ARENA_CHAT}}

# Blind test set (blind.jsonl): Arena-Hard clusters that pool and heldout never used, mapped
# by name only after the example configuration was frozen, and Bitext rows past the first
# SUPPORT_PER_INTENT of each intent. Its rows are not reviewed.
BLIND_CODE = (
    "Web Development & APIs", "E-Commerce Web Development", "Word Position in String",
    "Character Indexing and Counting", "Array Pair Sum Optimization",
    "HLSL Shader Decompilation Refactoring", "HDL Design and Verification",
    "GIS Scripting and Customization", "Odoo File Handling & Customization",
    "Video Download & Bot Scripts", "Excel VBA and Formulas",
    "Kubernetes Management & Configuration", "Docker Deployment & Configuration",
    "Automated Testing & Tools", "Game Development Engines", "JAX Sharding & Neural Networks",
    "Databricks & Spark Integration", "Random Number Generation",
    "Advanced Random Number Techniques", "Chatbot Development & Integration",
)
BLIND_MATH = (
    "Prime and Perfect Number Calculations", "Computing Standard Deviation",
    "Optimal Walking and Step Count", "Number Substitution Patterns",
    "Circular Motion and Revolutions", "Investment Growth and Taxes",
)
BLIND_CHAT = (
    "Aspiring Data Scientist Guidance", "Business Operations Analysis",
    "CIO Biotech IT Strategy", "Cybersecurity Research and Trends",
    "Digital Advertising Insights", "Elo Rating System Explained", "Expert Panel Discussion",
    "Finance and Banking Operations", "Generative AI Essentials",
    "GenAI in Enterprise Operations", "Options Trading Strategies",
    "Radiology AI in Healthcare", "Stock Market Strategies & Outcomes",
    "Taxation Knowledge and Queries", "Weather Forecast Accuracy",
)
BLIND_ARENA = {**{c: "code" for c in BLIND_CODE}, **{c: "math" for c in BLIND_MATH},
               **{c: "chat" for c in BLIND_CHAT}}
BLIND_SUPPORT_PER_INTENT = 4   # Bitext rows per intent after the SUPPORT_PER_INTENT used

# Second blind set (blind2.jsonl): every source row left unused by the sets above, labelled by
# reading (blind2-labels.tsv). MT-Bench second turns are left out: they depend on the first.
BLIND2_MT_BENCH = ("reasoning", "extraction", "stem")
BLIND2_VICUNA = ("fermi",)
BLIND2_SUPPORT_PER_INTENT = 4   # Bitext rows per intent after those of pool, heldout and blind
BLIND2_LABELS = HERE / "blind2-labels.tsv"

# Arena-Hard uid prefix -> reviewed label (None: fits none of the classes; dropped)
HELDOUT_REVIEW: dict[str, str | None] = {
    "a89e93c6": "code",   # "act as an experienced software developer ... web app"
    "6778936d": "code",   # After Effects expression for a shape path
    "7957dc05": "code",   # "clean this up? ```python ..."
    "91fe7453": "code",   # Haskell function for two-sum
    "204003c0": "code",   # "Write a python function that solves a quadratic equation"
    "01f0684c": "code",   # multiple-TSP framework in Python with DEAP
    "faa3e32b": "code",   # a Python exercise on if-conditions
    "15d6036c": "code",   # YAML schema for a player account
    "2ce5957b": "chat",   # feedback on the introduction of a how-to text
    "d35117b1": None,     # business ML task description: neither code, math nor chat
}

# Review of blind.jsonl's Arena-Hard rows (written to blind-reviewed.jsonl; blind.jsonl stays the
# unreviewed record). Each row was read once, before any prediction on blind.jsonl was seen, by
# the rule of HELDOUT_REVIEW: relabel when the request plainly belongs to another class (code:
# asks for writing, fixing or explaining code or programming tools; math: asks to compute, prove
# or solve a quantitative problem; support: a customer asking a business about their order,
# account or service; chat: everything else), drop (None) when it plainly fits none or is
# ambiguous between two. Rows not listed keep their cluster label. Bitext rows are not reviewed.
BLIND_REVIEW: dict[str, str | None] = {
    "4587e8a3": "code",   # chat: "output a Python script in OOP for a contextual ... bandit"
    "4a608737": "chat",   # code: asks whether a statistical stop-out method exists; no code
    "e7e76d4b": "chat",   # code: "write a service catalogue for a Microsoft M365 consultancy"
    "ab10af34": "math",   # chat: "What is the minimum cost ... for this transhipment problem?"
    "33166da9": "math",   # chat: two equations: "How long does each of the workout plans last?"
    "4ef42cc8": "code",   # math: "create a slider for a website" (circle radius UI)
    "40b8576c": "code",   # math: "Write a python class Circle that inherits from class Shape"
    "2c41e83c": "code",   # math: GluonTS forecasts, how to compute MSE in that code
    "f881bfef": None,     # math: design ideas for an alerting module: code or chat
    "ccebedca": "code",   # chat: "Give outline and a concept code for such a system"
    "53f4338f": "chat",   # code: WordPress themes, plugins and a market-entry strategy, lists
    "3bd60ed6": "code",   # chat: rewrite a JavaScript function
    "3735ce11": "code",   # chat: "Write a program to compute the Elo scores"
    "b7e2e311": "code",   # chat: "Develop a Python program snippet ..."
    "f9111d1c": "code",   # chat: "Write a python program that implements ... blockchain"
    "73e36294": "code",   # chat: edge test cases for "FICO > 750 && FICO <= 900 AND N_INQ < 2"
    "e64ca084": "chat",   # math: how to estimate a capacity plan under unknowns (advice)
    "f2d3430a": None,     # math: flat or mutual funds, "what should i do now?": math or chat
    "08d2f411": "code",   # math: "Write a Python function that takes user input as a string"
    "4086b666": "chat",   # math: "steps ... to become a legal corporation in Virginia"
    "9d668b3e": "code",   # math: "Write a java program ... greatest common divisor"
    "b4b1c3f7": "code",   # math: "Write a Scheme program to decide whether a number is odd"
    "2a6a198f": "code",   # chat: "Write sql request to calculate rolling avarage stock"
}

Row = dict[str, str]


def bench_rows(name: str, mapping: dict[str, str]) -> Iterator[Row]:
    with (PROMPTS / f"{name}_questions.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            if q["category"] in mapping:
                yield {"source": name, "id": str(q["question_id"]),
                       "label": mapping[q["category"]], "text": q["turns"][0]}


def arena_rows(mapping: dict[str, str] = ARENA) -> Iterator[Row]:
    with gzip.open(PROMPTS / "arena_hard_v0.1_questions.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            if q["cluster"] in mapping:
                yield {"source": "arena_hard", "id": q["uid"], "label": mapping[q["cluster"]],
                       "text": q["prompt"]}


def arena_clusters() -> list[str]:
    with gzip.open(PROMPTS / "arena_hard_v0.1_questions.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line)["cluster"] for line in fh]


def reviewed(row: Row, review: dict[str, str | None] = HELDOUT_REVIEW) -> Row | None:
    """Apply a review table (``HELDOUT_REVIEW`` by default) to an Arena-Hard row."""
    if row["source"] != "arena_hard" or row["id"][:8] not in review:
        return row
    label = review[row["id"][:8]]
    return None if label is None else {**row, "label": label}


def bitext_rows(skip: int = 0, keep: int = SUPPORT_PER_INTENT) -> Iterator[Row]:
    """Per intent, the rows after the first ``skip``, at most ``keep`` of them."""
    seen: dict[str, int] = defaultdict(int)
    path = PROMPTS / "bitext_customer_support_4.5k.csv.gz"
    with gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
        for i, row in enumerate(csv.DictReader(fh)):
            seen[row["intent"]] += 1
            if not skip < seen[row["intent"]] <= skip + keep:
                continue
            yield {"source": "bitext", "id": str(i), "label": "support",
                   "text": row["instruction"]}


def in_heldout(row: Row) -> bool:
    digest = hashlib.sha256(f"{row['source']}:{row['id']}".encode()).digest()
    return digest[0] % 2 == 1


def normalized(text: str) -> str:
    return " ".join(text.lower().split())


def key(row: Row) -> str:
    return f"{row['source']}:{row['id']}"


def split(rows: list[Row]) -> tuple[list[Row], list[Row]]:
    """(pool, heldout): by ``in_heldout``; held-out rows reviewed, pool duplicates dropped."""
    pool_texts = {normalized(r["text"]) for r in rows if not in_heldout(r)}
    pool: list[Row] = []
    heldout: list[Row] = []
    for original in rows:
        if not in_heldout(original):
            pool.append(original)
            continue
        row = reviewed(original)
        if row is not None and normalized(row["text"]) not in pool_texts:
            heldout.append(row)
    return pool, heldout


def blind_rows(used_ids: set[str], used_texts: set[str]) -> list[Row]:
    """The rows of ``blind.jsonl``: of neither pool nor heldout (by source:id and by text)."""
    return [row for row in [*arena_rows(BLIND_ARENA),
                            *bitext_rows(skip=SUPPORT_PER_INTENT, keep=BLIND_SUPPORT_PER_INTENT)]
            if key(row) not in used_ids and normalized(row["text"]) not in used_texts]


def derived() -> dict[str, list[Row]]:
    """Every file this script writes (name without ``.jsonl`` -> rows), in writing order."""
    rows = [*bench_rows("mt_bench", MT_BENCH), *bench_rows("vicuna_bench", VICUNA),
            *arena_rows(), *bitext_rows()]
    pool, heldout = split(rows)
    blind = blind_rows({key(r) for r in rows}, {normalized(r["text"]) for r in rows})
    blind_reviewed = [r for r in (reviewed(row, BLIND_REVIEW) for row in blind) if r is not None]
    blind2 = blind2_rows({key(r) for r in [*rows, *blind]},
                         {normalized(r["text"]) for r in [*rows, *blind]})
    return {"pool": pool, "heldout": heldout, "blind": blind,
            "blind-reviewed": blind_reviewed, "blind2": blind2}


def main() -> None:
    for name, rows in derived().items():
        write_rows(name, rows)


def read_blind2_labels() -> dict[str, str]:
    """``source:id`` -> label (``drop``: left out) from ``blind2-labels.tsv``."""
    with BLIND2_LABELS.open(encoding="utf-8", newline="") as fh:
        return {line["source:id"]: line["label"]
                for line in csv.DictReader(fh, delimiter="\t")}


def blind2_rows(used_ids: set[str], used_texts: set[str]) -> list[Row]:
    """The rows of ``blind2.jsonl``: unused by the other files, each text once."""
    labels = read_blind2_labels()
    unlabelled = [*bench_rows("mt_bench", dict.fromkeys(BLIND2_MT_BENCH, "")),
                  *bench_rows("vicuna_bench", dict.fromkeys(BLIND2_VICUNA, "")),
                  *arena_rows(dict.fromkeys(set(arena_clusters()) - set(ARENA)
                                            - set(BLIND_ARENA), ""))]
    if {key(r) for r in unlabelled} != set(labels):
        raise ValueError(f"{BLIND2_LABELS.name} does not list exactly the unused rows")
    candidates = [*({**r, "label": labels[key(r)]} for r in unlabelled),
                  *bitext_rows(skip=SUPPORT_PER_INTENT + BLIND_SUPPORT_PER_INTENT,
                               keep=BLIND2_SUPPORT_PER_INTENT)]
    rows: list[Row] = []
    texts = set(used_texts)
    for row in candidates:
        text = normalized(row["text"])
        if row["label"] == "drop" or key(row) in used_ids or text in texts:
            continue
        texts.add(text)
        rows.append(row)
    return rows


def write_rows(name: str, rows: list[Row]) -> None:
    """Write ``<name>.jsonl`` and print its count per label."""
    counts: dict[str, int] = defaultdict(int)
    with (HERE / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
        for row in rows:
            counts[row["label"]] += 1
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    for label, n in sorted(counts.items()):
        print(f"{name:14s} {label:8s} {n}")


if __name__ == "__main__":
    main()
