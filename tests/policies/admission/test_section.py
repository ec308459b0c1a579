"""The ``admission:`` section of routing.yaml: what it accepts, what it refuses (by path), and
which budget a tenant's requests count against."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from policies.admission.section import UNLIMITED, AdmissionSection, TenantBudget
from policies.errors import RoutingConfigError
from policies.registry import default_registry
from policies.schema import parse_routing
from tests.conftest import REPO_ROOT


def _routing(admission: Any) -> dict[str, Any]:
    doc = yaml.safe_load((REPO_ROOT / "config/routing.yaml").read_text())
    doc["admission"] = admission
    return doc


def test_a_full_section_is_parsed() -> None:
    routing = parse_routing(_routing({
        "max_in_flight": 64, "max_waiting": 10, "wait_timeout_s": 2.5,
        "tenants": {"acme": {"requests_per_minute": 600, "tokens_per_minute": 200000,
                             "priority": 2},
                    "batch": {"priority": -1}},
        "other_tenants": {"requests_per_minute": 60}}), default_registry())
    section = routing.section("admission")
    assert isinstance(section, AdmissionSection)
    assert (section.max_in_flight, section.max_waiting, section.wait_timeout_s) == (64, 10, 2.5)
    assert section.tenants["acme"] == TenantBudget(600, 200000, 2)
    assert not section.tenants["batch"].limited
    assert section.other_tenants.requests_per_minute == 60


def test_defaults_admit_everything() -> None:
    section = parse_routing(_routing({}), default_registry()).section("admission")
    assert section == AdmissionSection()
    assert section.max_in_flight == 0 and section.other_tenants is UNLIMITED
    assert not section.other_tenants.limited


def test_a_file_without_the_section_has_none() -> None:
    doc = _routing(None)
    del doc["admission"]
    assert parse_routing(doc, default_registry()).section("admission") is None


@pytest.mark.parametrize(("admission", "message"), [
    ({"max_in_flight": -1}, "admission.max_in_flight: must be >= 0"),
    ({"max_waiting": -5}, "admission.max_waiting: must be >= 0"),
    ({"wait_timeout_s": 0}, "admission.wait_timeout_s: must be within (0, 3600]"),
    ({"tenants": {"acme": {"requests_per_minute": 0}}},
     "admission.tenants.acme.requests_per_minute: must be >= 1"),
    ({"tenants": {"acme": {"tokens_per_minute": "lots"}}},
     "admission.tenants.acme.tokens_per_minute"),
    ({"tenants": {"acme": {"priority": 5000}}}, "admission.tenants.acme.priority"),
    ({"tenants": {"acme": {"rpm": 5}}}, "admission.tenants.acme.rpm: unknown key"),
    ({"other_tenant": {}}, "admission.other_tenant: unknown key"),
    ({"tenants": {"*": {"requests_per_minute": 5}}},
     "admission.tenants: a tenant name must not be empty or '*' (use other_tenants)"),
    ("yes", "admission: must be a mapping"),
    (None, "admission: must be a mapping"),
])
def test_bad_sections_are_refused_naming_the_field(admission: Any, message: str) -> None:
    with pytest.raises(RoutingConfigError) as raised:
        parse_routing(_routing(admission), default_registry())
    assert str(raised.value).startswith(message), str(raised.value)


def test_listed_tenants_have_their_own_budget_the_others_share_one() -> None:
    section = AdmissionSection(tenants={"acme": TenantBudget(10, priority=3)},
                               other_tenants=TenantBudget(5))
    assert section.budget_key("acme") == "acme"
    assert section.budget(section.budget_key("acme")).priority == 3
    for tenant in ("globex", None, ""):
        assert section.budget_key(tenant) is None
        assert section.budget(section.budget_key(tenant)).requests_per_minute == 5


@pytest.mark.parametrize("where", ["docs/operations.md", "policies/admission/section.py",
                                   "config/routing.yaml"])
def test_the_documented_examples_are_valid(where: str) -> None:
    text = (REPO_ROOT / where).read_text()
    if where.endswith(".yaml"):        # the commented example at the end of the file
        block = text.split("# admission:", 1)[1]
        example = "admission:" + "\n".join(line.removeprefix("#") for line in
                                           block.splitlines())
    else:
        example = re.findall(r"```yaml\n(admission:.*?)```", text, re.DOTALL)[0]
    section = parse_routing(_routing(yaml.safe_load(example)["admission"]),
                            default_registry()).section("admission")
    assert section.max_in_flight == 256
    assert section.tenants["acme"].requests_per_minute == 600
