"""Derive the labelled semantic-routing prompts from the public prompt sets in ``shared/traces``.

Run from the repository root (it reads ``../shared/traces/prompts``)::

    .venv/bin/python config/examples/semantic-eval/derive.py

Labels come from each source's own categories, never from reading the prompts:

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

``blind.jsonl`` (``write_blind``) was added after the example configuration was frozen: rows
that neither file uses (by ``source:id`` and by text), labelled by source category alone
and never reviewed, scored once (docs/semantic.md).
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


def reviewed(row: Row) -> Row | None:
    """Apply ``HELDOUT_REVIEW`` to a held-out Arena-Hard row."""
    if row["source"] != "arena_hard" or row["id"][:8] not in HELDOUT_REVIEW:
        return row
    label = HELDOUT_REVIEW[row["id"][:8]]
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


def main() -> None:
    rows = [*bench_rows("mt_bench", MT_BENCH), *bench_rows("vicuna_bench", VICUNA),
            *arena_rows(), *bitext_rows()]
    pool_texts = {normalized(r["text"]) for r in rows if not in_heldout(r)}
    outputs = {True: HERE / "heldout.jsonl", False: HERE / "pool.jsonl"}
    counts: dict[tuple[bool, str], int] = defaultdict(int)
    handles = {k: p.open("w", encoding="utf-8") for k, p in outputs.items()}
    try:
        for original in rows:
            side = in_heldout(original)
            row = reviewed(original) if side else original
            if row is None or (side and normalized(row["text"]) in pool_texts):
                continue
            counts[(side, row["label"])] += 1
            handles[side].write(json.dumps(row, ensure_ascii=False) + "\n")
    finally:
        for fh in handles.values():
            fh.close()
    for (side, label), n in sorted(counts.items()):
        print(f"{'heldout' if side else 'pool':8s} {label:8s} {n}")
    write_blind({f"{r['source']}:{r['id']}" for r in rows},
                {normalized(r["text"]) for r in rows})


def write_blind(used_ids: set[str], used_texts: set[str]) -> None:
    """``blind.jsonl``: rows of neither pool nor heldout (by source:id and by text)."""
    blind = [*arena_rows(BLIND_ARENA),
             *bitext_rows(skip=SUPPORT_PER_INTENT, keep=BLIND_SUPPORT_PER_INTENT)]
    counts: dict[str, int] = defaultdict(int)
    with (HERE / "blind.jsonl").open("w", encoding="utf-8") as fh:
        for row in blind:
            if (f"{row['source']}:{row['id']}" in used_ids
                    or normalized(row["text"]) in used_texts):
                continue
            counts[row["label"]] += 1
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    for label, n in sorted(counts.items()):
        print(f"blind    {label:8s} {n}")


if __name__ == "__main__":
    main()
