"""``--module-splits N --module-group K``: run group K of N, each test module whole in one group.

pytest-split balances single tests; a module's module-scoped fixtures (a model store, an operator,
a monitoring stack) then run once in every group that got one of its tests. Here whole modules are
assigned, the costliest first, each to the group with the least cost so far (the greedy
least-duration balance). A module's cost is its wall time measured in an earlier ``make test``
(``--module-times``: the groups run side by side on 2 cores, which stretches modules unevenly: in
one run quick integration modules x2-10, the replica-canary module x0.74); a module not measured
there costs the sum of its tests' single-cluster durations that pytest-split stores
(``--module-durations``, a test without one counts the average), scaled by how much the measured
modules were stretched. Deselected tests
are reported as such.

At the end a group prints each module's wall time in this run (its first test's start to its last
test's end, its fixtures' set-up and teardown included) beside the cost it was split on, and writes
them to ``--module-times-out``; ``python -m mlops_platform.testing.modulesplit OUT IN...`` merges
the kept times and the groups' files (a module's mean) into the ``--module-times`` of the next runs
(``make test-balance``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
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
    group.addoption(
        "--module-times",
        default="tests/cluster-module-times.json",
        help="module wall times measured in make test (JSON), preferred to --module-durations",
    )
    group.addoption(
        "--module-times-out", default=None, help="write this group's module wall times here (JSON)"
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


def module_costs(
    nodeids: Sequence[str], durations: Mapping[str, float], times: Mapping[str, float]
) -> dict[str, float]:
    """Each module's cost: its time in ``times``, else its tests' ``durations`` (the average for a
    test without one) times the stretch of the modules in both (their times over their durations)."""
    average = sum(durations.values()) / len(durations) if durations else 1.0
    summed: dict[str, float] = {}
    for nodeid in nodeids:
        module = nodeid.split("::", 1)[0]
        summed[module] = summed.get(module, 0.0) + durations.get(nodeid, average)
    both = [m for m in summed if m in times]
    stretch = sum(times[m] for m in both) / sum(summed[m] for m in both) if both else 1.0
    return {m: times[m] if m in times else cost * stretch for m, cost in summed.items()}


def _json(path: str | None) -> dict[str, float]:
    return json.loads(Path(path).read_text()) if path and Path(path).is_file() else {}


@pytest.hookimpl(trylast=True)  # after the marker and keyword selection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    splits, group = config.getoption("module_splits"), config.getoption("module_group")
    if not splits:
        return
    if not 1 <= group <= splits:
        raise pytest.UsageError(f"--module-group must be 1..{splits}, got {group}")
    durations, times = _json(config.getoption("module_durations")), _json(config.getoption("module_times"))
    costs = module_costs([i.nodeid for i in items], durations, times)
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
            f"module split: group {group} of {splits}: {len(mine)} modules, about {total:.0f}s"
            f" ({sum(m in times for m in mine)} of them measured in make test)"
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

    def walls(self) -> dict[str, float]:
        return {m: round(end - start, 1) for m, (start, end) in self.spans.items()}

    def lines(self, costs: Mapping[str, float]) -> list[str]:
        """Module by module, the longest first: its wall time and the cost it was split on."""
        walls = self.walls()
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
    out = config.getoption("module_times_out")
    if out:
        Path(out).write_text(json.dumps(_clock.walls(), indent=1, sort_keys=True) + "\n")


def merge(paths: Sequence[str]) -> dict[str, float]:
    """The module times of several files as one object: a module in several, their mean (the kept
    times and a new run's groups: one run's time of a module varies with what the other groups run
    beside it, most by ~10 %, a few up to x2)."""
    seen: dict[str, list[float]] = {}
    for path in paths:
        for module, wall in _json(path).items():
            seen.setdefault(module, []).append(wall)
    return {m: round(sum(v) / len(v), 1) for m, v in sorted(seen.items())}


if __name__ == "__main__":  # python -m mlops_platform.testing.modulesplit OUT IN...
    Path(sys.argv[1]).write_text(json.dumps(merge(sys.argv[2:]), indent=1) + "\n")
