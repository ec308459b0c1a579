"""Budgets no key reaches: tenants the routing file's ``admission:`` section lists that no key
of ``--api-keys-file`` names. Only a client sending ``x-tenant`` with that name spends such
a budget (a header any client can send), so a budget left without its tenant's key, or
written with another spelling than the keys file's, limits nobody it was meant for. The
router logs them at start and whenever either file is reloaded."""

from __future__ import annotations

from collections.abc import Collection

from policies.admission.section import AdmissionSection


def unkeyed_budgets(section: AdmissionSection | None, keyed: Collection[str]) -> list[str]:
    """A warning for each tenant ``section`` lists that is not among ``keyed`` (the tenants
    the keys file names)."""
    if section is None:
        return []
    return [f"admission.tenants.{name}: no key of the keys file names this tenant: only a "
            f"client sending x-tenant: {name} spends its budget"
            for name in section.tenants if name not in keyed]
