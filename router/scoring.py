"""Score and rerank bodies (vLLM's ``/score``, ``/v1/score``, ``/rerank``, ``/v1/rerank``,
``/v2/rerank``) → the texts the policies count.

A score request pairs its first side with its second: one to one, one to many or many to
many. Its sides come under the names vLLM takes, tried in vLLM's order: ``queries`` with
``documents`` or with ``items``, ``data_1`` with ``data_2``, ``text_1`` with ``text_2``. A
rerank request has one ``query`` and its ``documents``. Each side is an item or a list of
items; an item is a string or multimodal content, ``{"content": [parts]}``, whose text parts
are counted (the engine checks the rest: a model without multimodal input refuses it).
Sides that cannot be paired are refused in vLLM's own words and shape
(``router.errors.EngineBadRequest``), as the engine would refuse them.

What is counted: each text once, the queries then the documents (a batch of prompts, as
embedding inputs are), which is what an embedding model (a bi-encoder, scoring by the cosine
of two embeddings) prefills. A cross-encoder (a reranker) prefills each (query, document)
pair together, so for it a query scored against N documents is counted once where it is
prefilled N times: the count is low by the query's repeats. It is not repeated on purpose:
the routed prompt, its token ids and block hashes stay bounded by the body (a short body of
100,000 one-letter documents behind a long query would be billions of tokens to hold and
hash before any worker saw it). The engine's ``usage`` says what it prefilled, and that is
what budgets and metrics are charged. The context window is checked against each text on its
own: a pair too long for a cross-encoder's window is the engine's to refuse. Each text is one
prompt to the estimators, each with its one output step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from router.errors import EngineBadRequest, InvalidRequest
from workers.lax_values import lax_int

# a score request's two sides, under each pair of names vLLM takes, in the order it tries them
SCORE_SIDES = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"),
               ("text_1", "text_2"))


def scoring_texts(data: Mapping[str, Any], rerank: bool) -> list[str]:
    """The routed prompt of a score request (``rerank`` False) or a rerank request: its
    queries' texts, then its documents'."""
    if rerank:
        queries = [_item_text(_required(data, "query"), "query")]
        documents = _side_texts(_required(data, "documents"), "documents")
    else:
        first, second = _score_sides(data)
        queries, documents = _side_texts(data[first], first), _side_texts(data[second], second)
    _check_pairing(len(queries), len(documents))
    return queries + documents


def side_cuts(data: Mapping[str, Any], texts: list[str]) -> list[int] | None:
    """Each routed text's cut (``scoring_texts``' order: queries, then documents) by a score's
    ``max_tokens_per_query`` and ``max_tokens_per_doc`` (vLLM's lax integers; 0 or none:
    whole), so that the window is checked against what the engine keeps; None when neither
    is given."""
    per_query, per_doc = (_lax_count(data.get(name))
                          for name in ("max_tokens_per_query", "max_tokens_per_doc"))
    if not per_query and not per_doc:
        return None
    queries = len(texts) - _documents(data)
    return [per_query or 0] * queries + [per_doc or 0] * (len(texts) - queries)


def _documents(data: Mapping[str, Any]) -> int:
    """How many document texts a checked score or rerank body has."""
    for first, second in (("query", "documents"), *SCORE_SIDES):
        if data.get(first) is not None and data.get(second) is not None:
            value = data[second]
            return len(value) if isinstance(value, list) else 1
    return 0


def _lax_count(value: Any) -> int:
    """A positive count (``lax_int``), else 0."""
    count = lax_int(value)
    return count if count is not None and count > 0 else 0


def _required(data: Mapping[str, Any], name: str) -> Any:
    value = data.get(name)
    if value is None:
        raise InvalidRequest(f"Missing required parameter: '{name}'.", param=name)
    return value


def _score_sides(data: Mapping[str, Any]) -> tuple[str, str]:
    """The names of a score request's two sides: the first pair vLLM takes that it gives."""
    for first, second in SCORE_SIDES:
        if data.get(first) is not None and data.get(second) is not None:
            return first, second
    for first, second in SCORE_SIDES:      # one side given: the other is missing
        if data.get(first) is not None or data.get(second) is not None:
            needed = second if data.get(first) is not None else first
            also = " (or 'items')" if needed == "documents" else ""
            raise InvalidRequest(f"Missing required parameter: '{needed}'{also}.",
                                 param=needed)
    raise InvalidRequest("Missing required parameters: the two sides to score, 'queries' with "
                         "'documents' (or 'items'), 'data_1' with 'data_2', or 'text_1' with "
                         "'text_2'.", param="queries")


def _side_texts(value: Any, name: str) -> list[str]:
    """The texts of one side: an item, or a list of items."""
    if not isinstance(value, list):
        return [_item_text(value, name)]
    if {*map(type, value)} <= {str}:        # strings only (checked in C): as they are
        return list(value)
    return [_item_text(item, f"{name}[{i}]") for i, item in enumerate(value)]


def _item_text(value: Any, where: str) -> str:
    """A string, or the text parts of multimodal content, joined as vLLM joins them."""
    if isinstance(value, str):
        return value
    content = value.get("content") if isinstance(value, dict) else None
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}: must be a string or multimodal content "
                             '({"content": [parts]}).', param=where)
    return "".join(part["text"] for part in content
                   if isinstance(part, dict) and isinstance(part.get("text"), str))


def _check_pairing(queries: int, documents: int) -> None:
    """vLLM's checks of the two sides' lengths, in its order and words."""
    if queries > 1 and queries != documents:
        raise EngineBadRequest("Input lengths must be either 1:1, 1:N or N:N")
    if queries == 0:
        raise EngineBadRequest("At least one text element must be given")
    if documents == 0:
        raise EngineBadRequest("At least one text_pair element must be given")
