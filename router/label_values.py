"""Metric label values chosen by clients, kept to a bounded set.

A label value a client chooses (the ``x-tenant`` header, a digest of its API key) makes a
new Prometheus series the first time it is seen, and the series lives as long as the
process. Left open, a client sending a new value with every request would grow the router's
memory and every scrape of ``/metrics`` without end. ``BoundedLabelValues`` admits the first
``limit`` distinct values of at most ``max_chars`` printable characters; any other value is
counted under ``OTHER``, and ``folded`` says how many requests were. Values the operator
declared (``reserve``: the tenants of the admission section and of the keys file, at most
``limit`` of them) have their own series whatever clients sent first, and take their places
in the limit first: a client naming 100 tenants of its own before the real ones came had
their costs counted as ``OTHER``. A value no longer declared keeps the series it has.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from router.name_text import is_name_text

log = logging.getLogger(__name__)

OTHER = "(other)"
DEFAULT_MAX_CHARS = 64
DEFAULT_TENANT_LABELS = 100     # tenants with a series of their own (``Settings.tenant_labels``)


class BoundedLabelValues:
    """The values of one client-chosen label, first come first admitted, up to ``limit``."""

    __slots__ = ("_admitted", "_reserved", "folded", "limit", "max_chars", "name")

    def __init__(self, name: str, limit: int, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        if limit < 0:
            raise ValueError(f"{name} label limit: must be >= 0, got {limit}")
        if max_chars < 1:
            raise ValueError(f"{name} label max_chars: must be >= 1, got {max_chars}")
        self.name = name
        self.limit = limit
        self.max_chars = max_chars
        self._admitted: set[str] = set()
        self._reserved: frozenset[str] = frozenset()
        self.folded = 0          # requests counted under OTHER so far

    def reserve(self, values: Iterable[str]) -> None:
        """Admit ``values`` (replacing those reserved before; the first ``limit``, in order),
        ahead of those clients send. One reserved before and not now stays admitted: its
        series exist already."""
        kept = list(dict.fromkeys(v for v in values if v and v != OTHER
                                  and len(v) <= self.max_chars and is_name_text(v)))
        if len(kept) > self.limit:
            log.warning("metric label %r: %d values declared, %d kept (the limit): the others "
                        "count as %r unless admitted first come", self.name, len(kept),
                        self.limit, OTHER)
            kept = kept[:self.limit]
        self._admitted |= self._reserved - set(kept)
        self._admitted -= set(kept)
        self._reserved = frozenset(kept)

    def label(self, value: str, count: bool = True) -> str:
        """``value`` itself when admitted (or admissible now), else ``OTHER``. The empty
        string (no value) is always itself. ``count`` False: a lookup that is not a request
        counted (``folded`` counts requests)."""
        if not value or value in self._admitted or value in self._reserved:
            return value
        if (len(self._admitted) + len(self._reserved) < self.limit
                and len(value) <= self.max_chars
                and is_name_text(value) and value != OTHER):
            self._admitted.add(value)
            return value
        if not count:
            return OTHER
        if self.folded == 0:
            log.warning("metric label %r: value %.80r counted as %r (at most %d values of at "
                        "most %d printable characters; the first ones seen are kept)",
                        self.name, value, OTHER, self.limit, self.max_chars)
        self.folded += 1
        return OTHER

    def __len__(self) -> int:
        return len(self._admitted)
