"""Test tiers by directory (tests/unit -> unit, tests/integration -> integration, tests/e2e -> e2e,
tests/reliability -> reliability: the one place markers are set) and the project's pytest plugin,
loaded here (opt-in, never injected into other pytest sessions of an environment where the package
is installed)."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# No per-example deadline: `make test` runs the unit tier while lint runs and a cluster starts on
# 2 cores, where an example's time says nothing about the code (properties are what is checked).
settings.register_profile("mlops", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mlops")

pytest_plugins = ("mlops_platform.testing.plugin", "mlops_platform.testing.modulesplit")
_TIERS = ("unit", "integration", "e2e", "reliability")
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(str(item.path)).relative_to(_HERE).parts[0]
        if tier not in _TIERS:
            raise pytest.UsageError(f"{item.nodeid}: tests live in tests/{{{','.join(_TIERS)}}}/")
        item.add_marker(getattr(pytest.mark, tier))
