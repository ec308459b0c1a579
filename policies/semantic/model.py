"""A trained semantic classifier: embedder + micro-batcher + classifier + threshold.

``build_semantic_model(section, base_dir)`` loads the embedder (fine-tuned on the examples
first when the section sets ``fine_tune``: ``policies.semantic.fine_tune``), embeds the
examples of the ``semantic:`` section (and of its ``examples_file``, resolved against
``base_dir``), trains the classifier (``policies.semantic.classifier``) on those embeddings
with the section's surface features appended (``policies.semantic.surface``; the same
``inputs`` at request time) and starts the embedding thread.

``classify(text)`` (blocking) and ``classify_async(text)`` (awaitable; the event loop only
waits) return a ``Classification``. They never raise: empty text is the default class
without any model work, a classification below the threshold is the default class, and an
embedding failure, a full embedding queue or a wait longer than ``timeout_s`` is the default
class too (with ``outcome`` saying which).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from policies.errors import RoutingConfigError
from policies.semantic.batcher import BatcherOverloaded, MicroBatcher
from policies.semantic.cache import EmbeddingCache, Vector
from policies.semantic.classifier import LinearClassifier, TrainingReport, train_classifier
from policies.semantic.fine_tune import Progress
from policies.semantic.section import SemanticSection
from policies.semantic.surface import Matrix, classifier_inputs

log = logging.getLogger(__name__)

Outcome = Literal["classified", "unsure", "empty", "error", "timeout", "overloaded"]
TRAINING_BATCH = 32


class Embedder(Protocol):
    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


@dataclass(frozen=True, slots=True)
class Classification:
    label: str                  # the class the request gets
    confidence: float           # probability of the predicted class (0 when not classified)
    predicted: str | None       # the classifier's best class before the threshold
    outcome: Outcome


class SemanticModel:
    """Classifies texts; owns the embedding thread (``close()`` stops it)."""

    def __init__(self, section: SemanticSection, embedder: Embedder,
                 classifier: LinearClassifier, report: TrainingReport,
                 embedder_weights: Path | None = None) -> None:
        self.section = section
        self.embedder = embedder
        self.embedder_weights = embedder_weights   # the fine-tuned weights, when fine-tuned
        self.classifier = classifier
        self.report = report
        # an int8 embedder runs texts one by one anyway: resolving each as soon as its own
        # pass ends (batches of one, no gathering wait) keeps a text from waiting for the
        # passes of the texts batched after it
        per_text = bool(getattr(embedder, "quantized", False))
        self.batcher = MicroBatcher(
            embedder.embed, EmbeddingCache(section.cache_size),
            window_s=0.0 if per_text else section.batch.window_ms / 1000.0,
            max_batch=1 if per_text else section.batch.max_size,
            max_queue=section.batch.max_queue)
        self.timeout_s = section.timeout_ms / 1000.0

    def inputs(self, vectors: Matrix, texts: Sequence[str]) -> Matrix:
        """What the classifier reads for ``texts``, from their embeddings ``vectors``."""
        return classifier_inputs(vectors, texts, self.section.digit_weight)

    def embed_inputs(self, texts: Sequence[str]) -> Matrix:
        """What the classifier reads for ``texts``, embedding them first (``embed_all``)."""
        return self.inputs(embed_all(self.embedder, texts), texts)

    def decide(self, vector: Vector, text: str) -> Classification:
        """Apply the classifier and the confidence threshold to one text's embedding."""
        label, confidence = self.classifier.classify(self.inputs(vector, (text,)))
        if confidence < self.section.threshold:
            return Classification(self.section.default_class, confidence, label, "unsure")
        return Classification(label, confidence, label, "classified")

    def classify(self, text: str) -> Classification:
        if not text:
            return self._fallback("empty")
        try:
            vector = self.batcher.submit(text, self.timeout_s).result(timeout=self.timeout_s)
        except BatcherOverloaded:
            return self._fallback("overloaded")
        except (concurrent.futures.TimeoutError, TimeoutError):
            return self._fallback("timeout")
        except Exception:
            log.exception("semantic classification failed; using the default class")
            return self._fallback("error")
        return self.decide(vector, text)

    async def classify_async(self, text: str) -> Classification:
        if not text:
            return self._fallback("empty")
        try:
            future = asyncio.wrap_future(self.batcher.submit(text, self.timeout_s))
            # shield: a timeout here must not cancel a computation other requests share
            # (asyncio.timeout, not wait_for, which can swallow a cancel of this request)
            async with asyncio.timeout(self.timeout_s):
                vector = await asyncio.shield(future)
        except BatcherOverloaded:
            return self._fallback("overloaded")
        except TimeoutError:
            future.add_done_callback(_consume_outcome)
            return self._fallback("timeout")
        except Exception:
            log.exception("semantic classification failed; using the default class")
            return self._fallback("error")
        return self.decide(vector, text)

    def close(self) -> None:
        self.batcher.close()

    def _fallback(self, outcome: Outcome) -> Classification:
        return Classification(self.section.default_class, 0.0, None, outcome)


def _consume_outcome(future: asyncio.Future[Vector]) -> None:
    """Retrieve a late result nobody awaits any more, so asyncio does not log it."""
    if not future.cancelled():
        future.exception()


def load_examples(section: SemanticSection, base_dir: Path) -> tuple[list[str], list[str]]:
    """(texts, labels) of the YAML examples followed by those of ``examples_file``."""
    texts: list[str] = []
    labels: list[str] = []
    for name, spec in section.classes.items():
        texts.extend(spec.examples)
        labels.extend([name] * len(spec.examples))
    if section.examples_file is not None:
        path = base_dir / section.examples_file
        for row in read_labelled_rows(path, "semantic.examples_file"):
            if row.label not in section.classes:
                raise RoutingConfigError(
                    f"semantic.examples_file: {path} line {row.line}: label {row.label!r} "
                    "is not a "
                    f"declared class (declared: {', '.join(section.classes)})")
            texts.append(row.text)
            labels.append(row.label)
    given = set(labels)
    for name in section.classes:
        if name not in given:
            raise RoutingConfigError(
                f"semantic.classes.{name}: no examples, in the YAML or in examples_file: "
                "the classifier could never choose it, nor a rule on it match")
    return texts, labels


@dataclass(frozen=True, slots=True)
class LabelledRow:
    """One row of a labelled JSONL file."""

    line: int                        # its 1-based line in the file (blank lines count)
    text: str
    label: str
    fields: Mapping[str, object]     # the whole row, ``text`` and ``label`` included


def read_labelled_rows(path: Path, where: str) -> list[LabelledRow]:
    """Rows ``{"text": ..., "label": ...}`` of a JSONL file, blank lines skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise RoutingConfigError(f"{where}: cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise RoutingConfigError(f"{where}: {path} is not UTF-8 ({exc.reason})") from exc
    rows: list[LabelledRow] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RoutingConfigError(f"{where}: {path} line {number}: {exc.msg}") from exc
        text, label = (row.get("text"), row.get("label")) if isinstance(row, dict) else (0, 0)
        if not isinstance(text, str) or not isinstance(label, str) or not text.strip():
            raise RoutingConfigError(
                f"{where}: {path} line {number}: needs a non-empty \"text\" and a \"label\"")
        rows.append(LabelledRow(number, text, label, row))
    return rows


def read_labelled_jsonl(path: Path, where: str) -> list[tuple[str, str]]:
    """(text, label) of each row of ``read_labelled_rows`` (other keys are ignored)."""
    return [(row.text, row.label) for row in read_labelled_rows(path, where)]


def field_text(row: LabelledRow, field: str) -> str:
    """The row's ``field`` as text: a string as it is, another JSON value as JSON, ``(none)``
    where the row lacks it."""
    value = row.fields.get(field)
    return "(none)" if value is None else value if isinstance(value, str) else json.dumps(value)


def embed_all(embedder: Embedder, texts: Sequence[str]) -> npt.NDArray[np.float32]:
    parts = [embedder.embed(texts[i:i + TRAINING_BATCH])
             for i in range(0, len(texts), TRAINING_BATCH)]
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)


def build_semantic_model(section: SemanticSection, base_dir: Path,
                         progress: Progress | None = None) -> SemanticModel:
    """Load all-MiniLM-L6-v2 (imports torch), fine-tuned on the section's examples when
    ``fine_tune`` is set (``progress`` follows that training, which runs only when its
    result is not cached), and train the classifier on the examples."""
    from policies.semantic.embedder import MiniLmEmbedder

    texts, labels = load_examples(section, base_dir)
    if len(set(labels)) < 2:
        raise RoutingConfigError(
            "semantic.classes: examples of at least two classes are required")
    weights = None
    if section.fine_tune is not None:
        from policies.semantic.fine_tune import fine_tuned_weights

        weights = fine_tuned_weights(texts, labels, section.fine_tune, section.max_tokens,
                                     progress=progress)
    embedder = MiniLmEmbedder(max_tokens=section.max_tokens, threads=section.threads,
                              quantize=section.quantize,
                              runtime="onnx" if section.runtime == "onnx" else "torch",
                              weights=weights, tail_tokens=section.tail_tokens)
    vectors = classifier_inputs(embed_all(embedder, texts), texts, section.digit_weight)
    classifier, report = train_classifier(vectors, labels, section.classifier,
                                          tuned_encoder=weights is not None)
    log.info("semantic classifier: %s", report.summary())
    return SemanticModel(section, embedder, classifier, report, weights)
