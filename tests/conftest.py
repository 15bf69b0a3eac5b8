"""Test tiers by directory: tests/unit -> unit, tests/integration -> integration, tests/e2e -> e2e."""

from pathlib import Path

import pytest

_TIERS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.path)).parts
        for tier in _TIERS:
            if tier in parts and not item.get_closest_marker(tier):
                item.add_marker(getattr(pytest.mark, tier))
