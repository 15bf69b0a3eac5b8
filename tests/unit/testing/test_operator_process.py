"""testing.operator.Process: the ports an operator process logged it serves on, its own lines only."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from mlops_platform.testing import operator


def _serving(server: str, port: int) -> str:
    return json.dumps({"msg": "serving", "server": server, "address": f"127.0.0.1:{port}"}) + "\n"


def test_the_ports_come_from_this_process_s_serving_lines_not_an_earlier_one_s(tmp_path: Path) -> None:
    log = tmp_path / "operator.log"
    log.write_text(
        _serving("health probe", 1111) + _serving("metrics", 2222) + '{"msg": "manager stopped"}\n'
    )
    proc = subprocess.Popen(["true"])
    try:
        p = operator.Process(proc, "me", log, log_start=log.stat().st_size)  # appended to the old log
        assert (p.health_port, p.metrics_port) == (None, None)  # not the earlier process's
        with log.open("a") as out:
            out.write('{"msg": "waiting for caches to sync"}\nnot json\n' + _serving("health probe", 3333))
        assert (p.health_port, p.metrics_port) == (3333, None)
        with log.open("a") as out:
            out.write(_serving("metrics", 4444))
        assert (p.health_port, p.metrics_port) == (3333, 4444)
        assert [line["msg"] for line in p.lines()] == ["waiting for caches to sync", "serving", "serving"]
    finally:
        proc.wait()
