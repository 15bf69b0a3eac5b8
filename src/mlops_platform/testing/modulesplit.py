"""``--module-splits N --module-group K``: run group K of N, each test module whole in one group.

pytest-split balances single tests; a module's module-scoped fixtures (a model store, an operator,
a monitoring stack) then run once in every group that got one of its tests. Here whole modules are
assigned, the costliest first, each to the group with the least measured time so far (the greedy
least-duration balance), from the durations pytest-split stores (``--module-durations``, a test
without one counts the average). Deselected tests are reported as such. At the end the group prints
each module's wall time in this run (first test's start to last test's end, its fixtures' set-up and
teardown included) beside the measured cost it was split on: how far the make-test load stretched it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("module split")
    group.addoption(
        "--module-splits", type=int, default=0, help="split the selected tests into N groups of whole modules"
    )
    group.addoption("--module-group", type=int, default=0, help="the group (1..N) to run")
    group.addoption(
        "--module-durations", default="tests/cluster-durations.json", help="measured test durations (JSON)"
    )


def assign(costs: Mapping[str, float], groups: int) -> dict[str, int]:
    """Each module's group (0-based): the costliest first, to the least loaded group (ties: the
    first); deterministic."""
    loads = [0.0] * groups
    out: dict[str, int] = {}
    for module in sorted(costs, key=lambda m: (-costs[m], m)):
        g = min(range(groups), key=lambda i: (loads[i], i))
        out[module] = g
        loads[g] += costs[module]
    return out


@pytest.hookimpl(trylast=True)  # after the marker and keyword selection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    splits, group = config.getoption("module_splits"), config.getoption("module_group")
    if not splits:
        return
    if not 1 <= group <= splits:
        raise pytest.UsageError(f"--module-group must be 1..{splits}, got {group}")
    path = Path(config.getoption("module_durations"))
    durations: dict[str, float] = json.loads(path.read_text()) if path.is_file() else {}
    average = sum(durations.values()) / len(durations) if durations else 1.0
    costs: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        costs[module] = costs.get(module, 0.0) + durations.get(item.nodeid, average)
    groups = assign(costs, splits)
    _costs.update(costs)
    keep = [i for i in items if groups[i.nodeid.split("::", 1)[0]] == group - 1]
    dropped = [i for i in items if groups[i.nodeid.split("::", 1)[0]] != group - 1]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep
    mine = sorted(m for m, g in groups.items() if g == group - 1)
    total = sum(costs[m] for m in mine)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            f"module split: group {group} of {splits}: {len(mine)} modules, about {total:.0f}s measured"
        )


class ModuleClock:
    """Each module's wall time: its first test's start to its last test's end."""

    def __init__(self) -> None:
        self.spans: dict[str, list[float]] = {}

    def started(self, nodeid: str, now: float) -> None:
        self.spans.setdefault(nodeid.split("::", 1)[0], [now, now])

    def finished(self, nodeid: str, now: float) -> None:
        span = self.spans.get(nodeid.split("::", 1)[0])
        if span is not None:
            span[1] = now

    def lines(self, costs: Mapping[str, float]) -> list[str]:
        """Module by module, the longest first: its wall time and the cost it was split on."""
        walls = {m: end - start for m, (start, end) in self.spans.items()}
        out = []
        for m in sorted(walls, key=lambda m: (-walls[m], m)):
            cost = costs.get(m)
            was = f" (split on {cost:.0f}s: x{walls[m] / cost:.2f})" if cost else ""
            out.append(f"{walls[m]:7.0f}s {m}{was}")
        return out


_clock = ModuleClock()
_costs: dict[str, float] = {}


def pytest_runtest_logstart(nodeid: str) -> None:
    _clock.started(nodeid, time.monotonic())


def pytest_runtest_logfinish(nodeid: str) -> None:
    _clock.finished(nodeid, time.monotonic())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if not config.getoption("module_splits") or not _clock.spans:
        return
    terminalreporter.section("module wall times in this group")
    for line in _clock.lines(_costs):
        terminalreporter.write_line(line)
