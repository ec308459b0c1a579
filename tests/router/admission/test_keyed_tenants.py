"""router/admission/keyed_tenants.py: budgets no key of the keys file reaches are warned of,
at start and when either file is reloaded."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from policies.admission.section import AdmissionSection, TenantBudget
from router.admission.keyed_tenants import unkeyed_budgets
from tests.router.gateway_support import REPO_ROOT, RouterFactory, subset
from workers.fleet import FleetConfig


def test_a_listed_tenant_no_key_names_is_warned_of() -> None:
    section = AdmissionSection(tenants={"acme": TenantBudget(requests_per_minute=10),
                                        "Globex": TenantBudget(tokens_per_minute=100)})
    assert unkeyed_budgets(section, {"acme", "globex"}) == [
        "admission.tenants.Globex: no key of the keys file names this tenant: only a client "
        "sending x-tenant: Globex spends its budget"]
    assert unkeyed_budgets(section, {"acme", "Globex"}) == []
    assert unkeyed_budgets(None, set()) == []


@pytest.mark.integration
async def test_the_router_warns_at_start_and_when_the_keys_file_changes(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """A budget left without its tenant's key limited nobody it was meant for, silently."""
    keys = tmp_path / "keys.yaml"
    keys.write_text("acme: sk-acme\nglobex: sk-globex\n")
    routing = ((REPO_ROOT / "config/routing.yaml").read_text()
               + "admission:\n  tenants:\n    acme: {requests_per_minute: 10}\n"
               "    globex: {requests_per_minute: 10}\n")
    caplog.set_level(logging.WARNING, logger="router.app")
    await make_router(subset(emulated_fleet, ["h100-fast"]), routing, api_keys_file=keys,
                      reload_interval_s=0.05)
    assert not [r for r in caplog.records if "no key of the keys file" in r.getMessage()]
    keys.write_text("acme: sk-acme\n")                 # globex's key retired
    for _ in range(100):
        if any("tenants.globex: no key" in r.getMessage() for r in caplog.records):
            break
        await asyncio.sleep(0.05)
    [warning] = [r.getMessage() for r in caplog.records if "no key of the keys file" in
                 r.getMessage()]
    assert "admission.tenants.globex" in warning and str(keys) in warning
