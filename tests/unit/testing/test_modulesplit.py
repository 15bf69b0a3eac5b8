"""Whole modules per make-test group, the costliest first to the least loaded group."""

from __future__ import annotations

from mlops_platform.testing import modulesplit


def test_modules_go_whole_to_the_least_loaded_group() -> None:
    costs = {"a.py": 400.0, "b.py": 300.0, "c.py": 200.0, "d.py": 150.0, "e.py": 100.0, "f.py": 50.0}
    groups = modulesplit.assign(costs, 3)
    assert groups == {"a.py": 0, "b.py": 1, "c.py": 2, "d.py": 2, "e.py": 1, "f.py": 2}
    loads = [sum(c for m, c in costs.items() if groups[m] == g) for g in range(3)]
    assert loads == [400.0, 400.0, 400.0]
    assert modulesplit.assign(costs, 3) == groups  # deterministic


def test_one_group_takes_everything() -> None:
    assert set(modulesplit.assign({"x.py": 1.0, "y.py": 2.0}, 1).values()) == {0}


def test_the_clock_gives_each_module_its_first_start_to_last_end() -> None:
    clock = modulesplit.ModuleClock()
    for nodeid, start, end in (("a.py::x", 0.0, 10.0), ("a.py::y", 10.0, 30.0), ("b.py::z", 30.0, 35.0)):
        clock.started(nodeid, start)
        clock.finished(nodeid, end)
    assert clock.lines({"a.py": 20.0}) == ["     30s a.py (split on 20s: x1.50)", "      5s b.py"]
