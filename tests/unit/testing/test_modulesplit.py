"""Whole modules per make-test group, the costliest first to the least loaded group."""

from __future__ import annotations

from pathlib import Path

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


def test_measured_module_times_win_and_the_rest_is_stretched_like_them() -> None:
    durations = {"a.py::x": 10.0, "a.py::y": 10.0, "b.py::z": 30.0}
    ids = ["a.py::x", "a.py::y", "b.py::z", "c.py::new"]  # c: no duration, the average (50 / 3)
    costs = modulesplit.module_costs(ids, durations, {"a.py": 40.0})
    assert costs["a.py"] == 40.0  # measured in make test
    assert costs["b.py"] == 60.0  # stretched x2, as a.py was (40 / 20)
    assert round(costs["c.py"], 6) == round(2 * 50 / 3, 6)
    assert modulesplit.module_costs(ids, durations, {}) == {"a.py": 20.0, "b.py": 30.0, "c.py": 50 / 3}


def test_merge_joins_the_groups_files(tmp_path: Path) -> None:
    one, two = tmp_path / "1.json", tmp_path / "2.json"
    one.write_text('{"b.py": 2.0}')
    two.write_text('{"a.py": 1.0}')
    assert modulesplit.merge([str(one), str(two), str(tmp_path / "absent.json")]) == {
        "a.py": 1.0,
        "b.py": 2.0,
    }
    kept = tmp_path / "kept.json"
    kept.write_text('{"a.py": 3.0, "c.py": 5.0}')
    assert modulesplit.merge([str(kept), str(one), str(two)]) == {"a.py": 2.0, "b.py": 2.0, "c.py": 5.0}
