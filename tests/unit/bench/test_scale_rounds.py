"""bench.scale --repeat: ratios are taken round by round, against the best raw in-flight count."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from bench import scale


def _run(impl: str, c: int, rnd: int, children: float, ready: float) -> scale.Run:
    return scale.Run(impl, 1000, c, round=rnd, children_s=children, ready_s=ready, converge_cpu_s=10.0)


def test_each_round_is_compared_with_the_raw_writer_of_the_same_round() -> None:
    runs = [
        # round 0: a slow machine for both; round 1: a fast one for both
        _run("operator", 16, 0, 110.0, 220.0),
        _run("raw", 256, 0, 100.0, 200.0),
        _run("raw", 64, 0, 150.0, 210.0),  # the slower in-flight count: not the one compared with
        _run("operator", 16, 1, 55.0, 105.0),
        _run("raw", 256, 1, 50.0, 100.0),
        _run("raw", 64, 1, 80.0, 120.0),
    ]
    rows = {(r[0], r[2]): r for r in scale.repeated_rows(runs, [1000])}
    assert set(rows) == {("operator", "16"), ("raw", "256")}
    op = rows[("operator", "16")]
    assert op[3] == "2"
    assert op[4] == "82.5 (55.0-110.0)"  # children s across rounds
    # against the raw writer of its own round: 1.10 and 1.10 (children), 1.10 and 1.05 (Ready); a
    # comparison with the fastest raw run of any round would have said 2.20 for round 0
    assert op[8] == "1.10 (1.10-1.10)"
    assert op[9] == "1.08 (1.05-1.10)"
    assert rows[("raw", "256")][8] == "-"


def test_the_table_appears_only_when_rounds_were_repeated() -> None:
    once = [_run("operator", 16, 0, 110.0, 220.0), _run("raw", 256, 0, 100.0, 200.0)]
    assert "Repeated rounds" not in scale.render(once)
    again = [*once, _run("operator", 16, 1, 55.0, 105.0), _run("raw", 256, 1, 50.0, 100.0)]
    assert "Repeated rounds" in scale.render(again)


def test_the_operator_is_compared_with_the_reference_of_its_own_round() -> None:
    runs = [
        _run("operator", 16, 0, 110.0, 220.0),
        _run("reference", 16, 0, 100.0, 200.0),
        _run("raw", 256, 0, 100.0, 200.0),
        _run("operator", 16, 1, 45.0, 99.0),
        _run("reference", 16, 1, 50.0, 100.0),
    ]
    rows = {r[0]: r for r in scale.repeated_rows(runs, [1000])}
    # round 0: 1.10 / 1.10; round 1 (no raw run): 0.90 / 0.99; against the raw writer round 0 only
    assert rows["operator"][10] == "1.00 (0.90-1.10)"
    assert rows["operator"][11] == "1.04 (0.99-1.10)"
    assert rows["operator"][8] == "1.10"
    assert rows["reference"][10] == rows["reference"][11] == "-"
    assert rows["raw"][10] == "-"


def test_a_single_round_is_compared_with_the_reference_too() -> None:
    runs = [
        _run("operator", 16, 0, 110.0, 210.0),
        _run("reference", 16, 0, 100.0, 200.0),
        _run("raw", 256, 0, 100.0, 200.0),
    ]
    table = scale.render(runs)
    assert "| operator | 1000 | 256 | 1.10 | 1.05 | 1.10 | 1.05 |" in table
    assert "| reference | 1000 | 256 | 1.00 | 1.00 | - | - |" in table


def test_reports_of_several_invocations_read_as_one_matrix(tmp_path: Path) -> None:
    first = [
        scale.Run("operator", 1000, 16, children_s=110.0, ready_s=220.0,
                  change_idle=scale.Latency([10.0, 20.0], server_ms=[5.0, None])),
        scale.Run("raw", 1000, 256, children_s=100.0, ready_s=200.0),
    ]  # fmt: skip
    second = [scale.Run("reference", 1000, 16, round=0, children_s=50.0, ready_s=100.0)]
    (tmp_path / "scale.json").write_text(json.dumps({"runs": [asdict(r) for r in first]}))
    (tmp_path / "scale.partial.json").write_text(json.dumps([asdict(r) for r in second]))
    runs = scale.load_reports([tmp_path / "scale.json", tmp_path / "scale.partial.json"])
    assert [(r.impl, r.round) for r in runs] == [("operator", 0), ("raw", 0), ("reference", 1)]
    idle = runs[0].change_idle
    assert isinstance(idle, scale.Latency)
    assert idle.server_ms == [5.0, None]
    assert idle.p99 == 20.0
    assert [asdict(r) for r in runs[:2]] == [asdict(r) for r in first]


def test_a_report_writes_the_tables_and_keeps_its_inputs(tmp_path: Path) -> None:
    partial = tmp_path / "scale.partial.json"
    partial.write_text(json.dumps([asdict(_run("operator", 16, 0, 110.0, 220.0))]))
    assert scale.main(["--report", str(partial), "--out", str(tmp_path)]) == 0
    assert partial.exists()
    assert "| operator | 1000 | 16 | 110.0 | 220.0 |" in (tmp_path / "scale.md").read_text()
    assert json.loads((tmp_path / "scale.json").read_text())["runs"][0]["children_s"] == 110.0


def test_the_cpu_is_split_at_the_moment_all_children_existed() -> None:
    run = _run("operator", 16, 0, 500.0, 800.0)
    run.cpu_until_children = {"machine": 990.0, "impl": 52.3, "kube-apiserver": 414.0}
    run.cpu_until_ready = {"machine": 1590.0, "impl": 80.6, "kube-apiserver": 615.7}
    spans = scale.cpu_spans(run)
    assert [(label, seconds) for label, seconds, _ in spans] == [
        ("until children", 500.0),
        ("children to Ready", 300.0),
        ("until Ready", 800.0),
    ]
    assert spans[1][2] == {"machine": 600.0, "impl": 28.3, "kube-apiserver": 201.7}
    table = scale.render([run])
    assert "| operator | 1000 | children to Ready | 300.0 | 600.0 | 2.00 | 28.3 | - | 201.7 | - |" in table
    # a run saved before the split was recorded (a --report of an older scale.json): the total only
    old = _run("reference", 16, 0, 500.0, 800.0)
    old.cpu_until_ready = dict(run.cpu_until_ready)
    assert [label for label, _, _ in scale.cpu_spans(old)] == ["until Ready"]
