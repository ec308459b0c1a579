"""The ``semantic`` producer: sets ``request.semantic_class`` for rules ``when: {class: ...}``.

It is added automatically when routing.yaml has a ``semantic:`` section or a rule matches
``class:``; it has no parameters of its own (the section holds them). Building it loads the
embedding model and trains the classifier, so a reload retrains on the edited examples.

``produce`` blocks its (worker) thread until the embedding is ready, and ``should_offload``
tells ``policies.producers.runner`` to run it in a thread whenever the model has work to do
(an empty or cached text is answered inline); ``produce_async`` awaits the embedding instead,
so an event-loop caller holds no thread at all. Either way the embedding thread does the work.

Both set ``request.semantic_class`` and ``request.attributes``: ``semantic_classify_s``
(seconds spent), ``semantic_confidence`` (the probability of ``semantic_predicted``, the
classifier's best class, which differs from the class given when it was ``unsure``) and
``semantic_outcome`` (classified, unsure, empty, error, timeout, overloaded).

```yaml
producers:
  - type: semantic     # optional: implied by the semantic: section
```
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from policies.base import RoutingRequest
from policies.errors import RoutingConfigError
from policies.registry import BuildContext
from policies.semantic.cache import text_key
from policies.semantic.extras import extra_missing_message
from policies.semantic.model import Classification, SemanticModel
from policies.semantic.section import SECTION_NAME, SemanticSection, relative_to
from policies.semantic.text import request_text
from workers.models import WorkerView

log = logging.getLogger(__name__)

TYPE_NAME = "semantic"
PROVIDES = ("semantic_class",)


@dataclass(frozen=True, slots=True)
class SemanticProducerParams:
    """No parameters: the ``semantic:`` section configures the classifier."""


class SemanticProducer:
    def __init__(self, name: str, model: SemanticModel) -> None:
        self.name = name
        self.model = model

    def should_offload(self, request: RoutingRequest) -> bool:
        """Run ``produce`` in a worker thread unless the answer needs no model work."""
        try:
            text = self._text(request)
        except Exception:
            return False
        return bool(text) and self.model.batcher.cache.get(text_key(text)) is None

    def produce(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> None:
        start = time.perf_counter()
        try:
            text = self._text(request)
            result = self.model.classify(text)
        except Exception:
            log.exception("semantic producer failed on %s", request.request_id)
            result = Classification(self.model.section.default_class, 0.0, None, "error")
        self._record(request, result, time.perf_counter() - start)

    async def produce_async(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> None:
        start = time.perf_counter()
        try:
            text = self._text(request)
            result = await self.model.classify_async(text)
        except Exception:
            log.exception("semantic producer failed on %s", request.request_id)
            result = Classification(self.model.section.default_class, 0.0, None, "error")
        self._record(request, result, time.perf_counter() - start)

    def inherit_state(self, previous: SemanticProducer) -> None:
        """On reload: keep the embedding cache when the embeddings are the same (same text
        window, arithmetic and encoder weights: a fine-tuned encoder changes with its
        examples), and stop the previous embedding thread (without waiting: this runs on
        the event loop)."""
        old, new = previous.model.section, self.model.section
        if ((old.max_tokens, old.tail_tokens, old.quantize, old.runtime,
             previous.model.embedder_weights)
                == (new.max_tokens, new.tail_tokens, new.quantize, new.runtime,
                    self.model.embedder_weights)):
            self.model.batcher.cache = previous.model.batcher.cache
        previous.model.batcher.close(timeout=None)

    def close(self) -> None:
        self.model.close()

    def _text(self, request: RoutingRequest) -> str:
        section = self.model.section
        return request_text(request, section.text, section.max_chars, section.tail_chars)

    @staticmethod
    def _record(request: RoutingRequest, result: Classification, elapsed_s: float) -> None:
        request.semantic_class = result.label
        request.attributes["semantic_classify_s"] = elapsed_s
        request.attributes["semantic_confidence"] = result.confidence
        request.attributes["semantic_predicted"] = result.predicted
        request.attributes["semantic_outcome"] = result.outcome


def build_semantic_producer(params: SemanticProducerParams,
                            context: BuildContext) -> SemanticProducer:
    message = extra_missing_message()
    if message is not None:
        raise RoutingConfigError(f"{context.path}: {message}")
    section = context.routing.section(SECTION_NAME)
    if not isinstance(section, SemanticSection):
        raise RoutingConfigError(
            f"{context.path}: semantic classes are used but the routing file has no "
            f"'{SECTION_NAME}:' section declaring them")
    from policies.semantic.model import build_semantic_model

    return SemanticProducer(context.name,
                            build_semantic_model(section, relative_to(context.routing.source)))
