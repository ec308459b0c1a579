"""One trained semantic model of the example configuration, shared by the torch tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from policies.semantic.extras import missing_extra_packages
from tests.policies.semantic.semantic_support import EXAMPLE_ROUTING


@pytest.fixture(scope="session")
def example_model() -> Iterator[object]:
    if missing_extra_packages():
        pytest.skip("the semantic extra is not installed")
    from policies.loader import load_routing
    from policies.semantic.model import build_semantic_model
    from policies.semantic.section import SECTION_NAME

    section = load_routing(EXAMPLE_ROUTING).section(SECTION_NAME)
    model = build_semantic_model(section, EXAMPLE_ROUTING.parent)
    yield model
    model.close()
