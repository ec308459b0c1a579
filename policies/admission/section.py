"""The ``admission:`` section of routing.yaml: tenants' budgets and the router's in-flight limit.

```yaml
admission:
  max_in_flight: 256        # requests this router process forwards at once (0: no limit)
  max_waiting: 1024         # requests waiting for a slot; beyond: 503 (see below)
  wait_timeout_s: 30        # a request waiting longer is answered 503
  tenants:                  # budgets by tenant (x-tenant, or the tenant its API key names)
    acme: {requests_per_minute: 600, tokens_per_minute: 200000, priority: 1}
    batch: {tokens_per_minute: 1000000, priority: -1, max_in_flight: 16}
  other_tenants:            # every other request, tenants not listed and none, together
    requests_per_minute: 120
    max_in_flight: 32
```

A budget counts over the last 60 seconds: a request is refused 429 while its tenant's
requests in that window reach ``requests_per_minute``, or its tokens (prompt and completion,
as the worker counted them) reach ``tokens_per_minute``. ``priority`` orders the requests
waiting for a slot (higher first, first come first served within one priority), and a
request finding ``max_waiting`` waiting takes the place of the newest one of a lower
priority (that one is answered 503) or is answered 503 itself. A budget's ``max_in_flight``
caps its requests in this router at once, in flight or waiting for a slot: one more is
refused 429 (one tenant's slow streams took every slot of ``max_in_flight``, and the others
waited, whatever their priority). Every field
is optional; an absent section admits everything. The section reloads with the file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from policies.errors import ParamError, RoutingConfigError
from policies.params import build_params

SECTION_NAME = "admission"
MAX_PRIORITY = 1000
OTHER_TENANTS_KEY = "*"    # how the other_tenants budget is keyed where budgets are counted


@dataclass(frozen=True, slots=True)
class TenantBudget:
    """One tenant's budget per minute (None: unlimited), its waiting priority and its
    requests at once (None: as many as the in-flight limit lets through)."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    priority: int = 0
    max_in_flight: int | None = None

    def __post_init__(self) -> None:
        for name in ("requests_per_minute", "tokens_per_minute", "max_in_flight"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ParamError(name, "must be >= 1 (leave it out for no limit)")
        if not -MAX_PRIORITY <= self.priority <= MAX_PRIORITY:
            raise ParamError("priority", f"must be within -{MAX_PRIORITY}..{MAX_PRIORITY}")

    @property
    def limited(self) -> bool:
        return self.requests_per_minute is not None or self.tokens_per_minute is not None


UNLIMITED = TenantBudget()


@dataclass(frozen=True, slots=True)
class AdmissionSection:
    """The whole section, validated."""

    max_in_flight: int = 0
    max_waiting: int = 1024
    wait_timeout_s: float = 30.0
    tenants: Mapping[str, TenantBudget] = field(default_factory=lambda: MappingProxyType({}))
    other_tenants: TenantBudget = UNLIMITED

    def __post_init__(self) -> None:
        if self.max_in_flight < 0:
            raise ParamError("max_in_flight", "must be >= 0 (0: no limit)")
        if self.max_waiting < 0:
            raise ParamError("max_waiting", "must be >= 0")
        if not 0 < self.wait_timeout_s <= 3600:
            raise ParamError("wait_timeout_s", "must be within (0, 3600] seconds")
        for name in self.tenants:
            if not name or name == OTHER_TENANTS_KEY:
                raise ParamError("tenants", f"a tenant name must not be empty or "
                                            f"{OTHER_TENANTS_KEY!r} (use other_tenants)")

    def budget_key(self, tenant: str | None) -> str | None:
        """The budget a request of ``tenant`` counts against: its own name when listed,
        ``None`` for the shared ``other_tenants`` budget."""
        return tenant if tenant is not None and tenant in self.tenants else None

    def budget(self, key: str | None) -> TenantBudget:
        return self.other_tenants if key is None else self.tenants[key]

    @staticmethod
    def counted_as(key: str | None) -> str:
        """Where the budget ``key`` (``budget_key``'s) is counted: the tenant's name, or
        ``OTHER_TENANTS_KEY`` for the shared budget."""
        return OTHER_TENANTS_KEY if key is None else key


def parse_admission_section(raw: Any, path: str) -> AdmissionSection:
    """Section parser registered with the policy registry."""
    if raw is None:
        raise RoutingConfigError(f"{path}: must be a mapping")
    section = build_params(AdmissionSection, raw, path)
    return dataclasses.replace(section, tenants=MappingProxyType(dict(section.tenants)))
