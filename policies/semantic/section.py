"""The ``semantic:`` section of routing.yaml: classes, their examples and the classifier's knobs.

```yaml
semantic:
  default_class: chat          # unsure, empty or unreadable prompts get this class
  threshold: 0.5               # minimum class probability; below it: default_class
  text: last-user              # last-user | all-user | system+last-user
  max_tokens: 64               # tokens of that text the embedder reads (8..256)
  tail_tokens: 0               # of those, how many come from the end of a text too long for
                               # them (0: the first max_tokens only); 0..max_tokens - 3
  classifier: auto             # auto | logistic-regression | nearest-centroid
  digit_weight: 0.0            # w × √(digit share of the text) appended to each embedding
                               # before the classifier (0: nothing): policies.semantic.surface
  examples_file: null          # optional JSONL of {"text", "label"}, relative to this file
  cache_size: 4096             # embeddings kept, by content hash (0: no cache)
  threads: 1                   # torch threads of the embedding thread
  quantize: false              # dynamic int8 linear layers (see docs/semantic.md)
  runtime: torch               # torch | onnx (ONNX Runtime, exported on first use)
  timeout_ms: 250              # longer than this: default class (outcome "timeout")
  fine_tune: null              # a mapping (e.g. {}) to fine-tune the encoder on the examples
                               # first (SetFit; cached on disk): policies.semantic.fine_tune
  batch: {window_ms: 2.0, max_size: 16, max_queue: 256}   # beyond max_queue: default class
  classes:
    code: {examples: ["Write a Python function that ...", "..."]}
    chat: {examples: ["..."]}
```

Parsing checks that the ``semantic`` extra is importable (without importing it), so
``kvroute validate`` refuses a semantic configuration on an installation without torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policies.errors import ParamError, RoutingConfigError
from policies.params import build_params
from policies.semantic.classifier import ClassifierMethod
from policies.semantic.embedder_limits import MODEL_WINDOW_TOKENS, SPECIAL_TOKENS
from policies.semantic.extras import extra_missing_message
from policies.semantic.fine_tune import FineTuneParams
from policies.semantic.text import TextMode

SECTION_NAME = "semantic"
CHARS_PER_TOKEN_BOUND = 16   # text beyond max_tokens × this is never looked at
RUNTIMES = ("torch", "onnx")   # what runs the encoder (policies.semantic.embedder)


@dataclass(frozen=True, slots=True)
class BatchParams:
    window_ms: float = 2.0
    max_size: int = 16
    max_queue: int = 256

    def __post_init__(self) -> None:
        if not 0 <= self.window_ms <= 50:
            raise ParamError("window_ms", "must be within 0..50")
        if not 1 <= self.max_size <= 256:
            raise ParamError("max_size", "must be within 1..256")
        if self.max_queue < 1:
            raise ParamError("max_queue", "must be >= 1")


@dataclass(frozen=True, slots=True)
class ClassSpec:
    examples: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if any(not text.strip() for text in self.examples):
            raise ParamError("examples", "must not contain empty strings")


@dataclass(frozen=True, slots=True)
class SemanticSection:
    classes: Mapping[str, ClassSpec]
    default_class: str
    threshold: float = 0.5
    text: TextMode = "last-user"
    max_tokens: int = 64
    tail_tokens: int = 0
    classifier: ClassifierMethod = "auto"
    digit_weight: float = 0.0
    examples_file: str | None = None
    cache_size: int = 4096
    threads: int = 1
    quantize: bool = False
    runtime: str = "torch"
    timeout_ms: float = 250.0
    batch: BatchParams = field(default_factory=BatchParams)
    fine_tune: FineTuneParams | None = None

    def __post_init__(self) -> None:
        if not self.classes:
            raise ParamError("classes", "required (at least one class with examples)")
        if any(not name.strip() for name in self.classes):
            # (it could be chosen, but no rule can name it, nor a header or metric show it)
            raise ParamError("classes", "a class name must not be empty")
        if self.examples_file is not None and not self.examples_file.strip():
            raise ParamError("examples_file", "must be a path (or null for none)")
        if not self.default_class:
            raise ParamError("default_class", "must be a non-empty string")
        if not 0.0 <= self.threshold <= 1.0:
            raise ParamError("threshold", "must be within 0..1")
        if not 8 <= self.max_tokens <= MODEL_WINDOW_TOKENS:
            raise ParamError("max_tokens", f"must be within 8..{MODEL_WINDOW_TOKENS}")
        if not 0 <= self.tail_tokens <= self.max_tokens - SPECIAL_TOKENS - 1:
            raise ParamError("tail_tokens",
                             f"must be within 0..{self.max_tokens - SPECIAL_TOKENS - 1} "
                             f"(max_tokens - 3: the window keeps [CLS], [SEP] and at least "
                             f"one wordpiece of the text's start)")
        if not 0.0 <= self.digit_weight <= 100.0:
            raise ParamError("digit_weight", "must be within 0..100")
        if self.cache_size < 0:
            raise ParamError("cache_size", "must be >= 0")
        if self.timeout_ms <= 0:
            raise ParamError("timeout_ms", "must be > 0")
        if self.runtime not in RUNTIMES:
            raise ParamError("runtime", f"must be one of {', '.join(RUNTIMES)}")
        if not 1 <= self.threads <= 64:
            raise ParamError("threads", "must be within 1..64")

    @property
    def max_chars(self) -> int:
        """Characters of a text's start that are looked at."""
        return self.max_tokens * CHARS_PER_TOKEN_BOUND

    @property
    def tail_chars(self) -> int:
        """Characters of a long text's end that are looked at (0 without ``tail_tokens``)."""
        return self.tail_tokens * CHARS_PER_TOKEN_BOUND

    @property
    def labels(self) -> tuple[str, ...]:
        """Every class a request can get: the declared ones plus the default."""
        names = tuple(self.classes)
        return names if self.default_class in names else (*names, self.default_class)


def relative_to(source: str) -> Path:
    """The folder a routing file's relative paths (``examples_file``) are read from: the
    file's own, or the working directory for a config built in memory (``<memory>``)."""
    return Path(source).resolve().parent if not source.startswith("<") else Path.cwd()


def parse_semantic_section(raw: Any, path: str) -> SemanticSection:
    """Section parser registered with the policy registry."""
    message = extra_missing_message()
    if message is not None:
        raise RoutingConfigError(f"{path}: {message}")
    if raw is None:
        raise RoutingConfigError(f"{path}: must be a mapping")
    return build_params(SemanticSection, raw, path)
