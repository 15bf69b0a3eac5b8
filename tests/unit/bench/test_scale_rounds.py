"""bench.scale --repeat: ratios are taken round by round, against the best raw in-flight count."""

from __future__ import annotations

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
