"""Admission: the ``admission:`` section of routing.yaml (tenants' budgets, the in-flight
limit and its waiting queue). The router enforces it (``router.admission``); this package
only parses and validates it, so that ``kvroute validate`` and reloads check it with the
rest of the file. See docs/operations.md, "Admission".
"""

from __future__ import annotations

from policies.admission.section import SECTION_NAME, parse_admission_section
from policies.registry import PluginRegistry


def register(registry: PluginRegistry) -> None:
    registry.register_section(SECTION_NAME, parse_admission_section)
