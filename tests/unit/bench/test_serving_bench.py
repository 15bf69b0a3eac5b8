"""bench.serving's pure parts: percentiles, log lines, a pod's milestones and times, the cold start's
phases, the run order, and the hand-written YAML against the pod template the operator builds."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import yaml
from bench import _common as common
from bench import serving
from bench._common import percentile

from mlops_platform import api
from mlops_platform.controllers.inferenceservice.children import base, deployment
from mlops_platform.devcluster import demo

T0 = serving.parse_time("2026-12-06T08:28:13.000000Z")


def pod(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "creationTimestamp": "2026-12-06T08:28:13Z"}, "status": status}


def cond(type_: str, at: str, status: str = "True") -> dict[str, Any]:
    return {"type": type_, "status": status, "lastTransitionTime": at}


STARTED = pod(
    phase="Running",
    conditions=[
        cond("PodScheduled", "2026-12-06T08:28:13Z"),
        cond("Initialized", "2026-12-06T08:28:15Z"),
        cond("Ready", "2026-12-06T08:28:24Z"),
    ],
    initContainerStatuses=[
        {
            "name": "storage-initializer",
            "state": {
                "terminated": {"startedAt": "2026-12-06T08:28:14Z", "finishedAt": "2026-12-06T08:28:15Z"}
            },
        }
    ],
    containerStatuses=[{"name": "predictor", "state": {"running": {"startedAt": "2026-12-06T08:28:15Z"}}}],
)

INIT_LOG = "\n".join(
    [
        '2026-12-06T08:28:14.758017678Z {"msg":"model download started","uri":"s3://models/iris/1"}',
        "2026-12-06T08:28:14.763053114Z "
        + json.dumps({"msg": "model delivered", "bytes": 991, "seconds": 0.005, "mib_per_second": 0.2}),
    ]
)
SERVER_LOG = "\n".join(
    [
        "2026-12-06T08:28:17.242680306Z 2026-12-06 08:28:17,242 [mlserver] WARNING - Model name 'iris' ...",
        "2026-12-06T08:28:17.993035711Z INFO:     Uvicorn running on http://0.0.0.0:8080",
        "2026-12-06T08:28:19.936592225Z 2026-12-06 08:28:19,932 [mlserver][iris] INFO - Loaded model 'iris'",
    ]
)


def test_percentile_is_nearest_rank() -> None:
    xs = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert [percentile(xs, p) for p in (50, 95, 99, 100)] == [3.0, 5.0, 5.0, 5.0]
    assert percentile(list(map(float, range(1, 101))), 99) == 99.0
    assert math.isnan(percentile([], 50))


def test_summary_skips_missing_values() -> None:
    s = serving.summary([3.0, None, 1.0, 2.0])
    assert (s["n"], s["p50"], s["p95"], s["min"], s["max"]) == (3.0, 2.0, 3.0, 1.0, 3.0)
    assert math.isnan(serving.summary([None])["p50"])


def test_log_lines_keep_the_runtimes_timestamps_to_the_microsecond() -> None:
    lines = serving.log_lines(SERVER_LOG + "\nnot a timestamped line")
    assert len(lines) == 3
    assert lines[0][0] == pytest.approx(T0 + 4.242680, abs=1e-6)
    assert serving.first_line(lines, "Loaded model") == pytest.approx(T0 + 6.936592, abs=1e-6)
    assert serving.first_line(lines, "nowhere") is None


def test_the_initializers_delivered_line() -> None:
    record = serving.delivered(serving.log_lines(INIT_LOG))
    assert record is not None
    assert (record["bytes"], record["seconds"], record["mib_per_second"]) == (991, 0.005, 0.2)
    assert record["at"] == pytest.approx(T0 + 1.763053, abs=1e-6)
    assert serving.delivered(serving.log_lines(SERVER_LOG)) is None


@pytest.mark.parametrize(
    ("p", "expect"),
    [
        (pod(phase="Pending"), {"created"}),
        (
            pod(phase="Pending", conditions=[cond("PodScheduled", "2026-12-06T08:28:13Z")]),
            {"created", "scheduled"},
        ),
        (
            pod(phase="Pending", conditions=[cond("PodScheduled", "x"), cond("Initialized", "x", "False")]),
            {"created", "scheduled"},
        ),
        (STARTED, {"created", "scheduled", "initialized", "running", "ready"}),
    ],
    ids=["created", "scheduled", "initializing", "ready"],
)
def test_milestones_from_a_pod_status(p: dict[str, Any], expect: set[str]) -> None:
    assert serving.milestones(p) == expect


def test_status_times_read_every_timestamp_of_the_pod() -> None:
    got = {k: v - T0 for k, v in serving.status_times(STARTED).items()}
    assert got == {
        "created": 0.0,
        "scheduled": 0.0,
        "initialized": 2.0,
        "ready": 11.0,
        "init_started": 1.0,
        "init_finished": 2.0,
        "server_started": 2.0,
    }
    assert serving.status_times({"metadata": {}, "status": {}}) == {}


def test_phases_add_up_to_the_total() -> None:
    seen = {"created": T0 + 0.3, "scheduled": T0 + 0.4, "ready": T0 + 11.2}
    got = serving.phases(T0, seen, serving.log_lines(INIT_LOG), serving.log_lines(SERVER_LOG), T0 + 11.5)
    assert [k for k, _ in serving.PHASES] == list(got)
    assert got["create"] == pytest.approx(0.3, abs=1e-5)
    assert got["schedule"] == pytest.approx(0.1, abs=1e-5)
    assert got["start"] == pytest.approx(1.758018 - 0.4, abs=1e-5)
    assert got["download"] == pytest.approx(0.005035, abs=1e-5)
    assert got["load"] == pytest.approx(6.936592 - 4.242680, abs=1e-5)
    assert got["ready"] == pytest.approx(11.2 - 6.936592, abs=1e-5)
    assert got["answer"] == pytest.approx(0.3, abs=1e-5)
    assert sum(v for v in got.values() if v is not None) == pytest.approx(11.5, abs=1e-5)
    assert serving.until_loaded(got) == pytest.approx(6.936592, abs=1e-5)


def test_a_missing_log_line_leaves_its_two_phases_unknown_and_the_answer_caps_ready() -> None:
    seen = {"created": T0 + 0.3, "scheduled": T0 + 0.4, "ready": T0 + 12.0}  # observed after the answer
    got = serving.phases(T0, seen, serving.log_lines(INIT_LOG), [], T0 + 11.5)
    assert got["server"] is None and got["load"] is None and got["ready"] is None
    assert got["answer"] == 0.0
    assert serving.until_loaded(got) is None


def test_runs_are_interleaved_the_first_path_alternating() -> None:
    order = serving.interleaved(runs=2, warmup=1)
    assert order == [
        (0, "operator", False),
        (0, "hand-written", False),
        (1, "hand-written", True),
        (1, "operator", True),
        (2, "operator", True),
        (2, "hand-written", True),
    ]
    assert serving.abba(2) == ["operator", "hand-written", "hand-written", "operator"]


def test_the_hand_written_yaml_is_the_pod_template_the_operator_builds() -> None:
    """The hand-written path is "what a careful user writes": the operator's own template, copied.
    A change of the runtime table or the builders shows here: copy it into HAND_WRITTEN_YAML."""
    isvc = yaml.safe_load(serving.ISVC_YAML)
    isvc["metadata"] |= {"namespace": serving.NAMESPACE, "uid": "u", "generation": 1}
    decoded = api.decode(isvc)
    built = deployment.build(base.Target(decoded, base.predictor(decoded)), demo.local_settings())
    docs = {d["kind"]: d for d in yaml.safe_load_all(serving.HAND_WRITTEN_YAML)}
    hand = docs["Deployment"]
    assert hand["spec"]["template"]["spec"] == built["spec"]["template"]["spec"]
    for key in ("replicas", "strategy", "revisionHistoryLimit", "progressDeadlineSeconds"):
        assert hand["spec"][key] == built["spec"][key], key
    ours = {
        k: v for k, v in built["spec"]["template"]["metadata"]["annotations"].items() if "model-uri" not in k
    }
    assert hand["spec"]["template"]["metadata"]["annotations"] == ours
    assert docs["Service"]["spec"]["selector"] == hand["spec"]["selector"]["matchLabels"]


def test_the_fetch_pod_runs_that_initializer_on_another_uri_without_a_layout() -> None:
    p = serving.fetch_pod("fetch-64mib-0", "s3://models/bench/blob-64mib")
    (init,) = p["spec"]["initContainers"]
    assert init["name"] == "storage-initializer"
    assert init["args"][:5] == ["fetch", "s3://models/bench/blob-64mib", "/mnt/models", "--layout", "none"]
    assert "--format" not in init["args"] and "--endpoint" in init["args"]
    assert p["spec"]["restartPolicy"] == "Never"
    assert p["spec"]["nodeSelector"] == {"mlops.platform/real-node": "true"}


def test_render_writes_every_section_from_a_result() -> None:
    def start(path: str, run: int, total: float, counted: bool = True) -> dict[str, Any]:
        phases = {k: 1.0 for k, _ in serving.PHASES} | {"ready": total - 7.0}
        return {"path": path, "run": run, "counted": counted, "total": total, "phases": phases,
                "delivered": {"seconds": 0.004}}  # fmt: skip

    result = {
        "cold_start": [start("operator", 0, 99.0, counted=False)]
        + [start(p, i, 11.0 + 10 * (i % 2)) for i in range(1, 4) for p in serving.PATHS],
        "latency": [
            {"path": p, "round": i, "requests": 3, "error_count": 0, "latencies_ms": [4.0, 5.0, 6.0]}
            for i, p in enumerate(serving.abba(1), 1)
        ],
        "network_policies": [],
        "download": [
            {"mib": 64, "fetch": 0, "seconds": 0.2, "mib_per_second": 320.0, "init_container_seconds": 1.0}
        ],
        "arguments": {"runs": 3, "warmup": 1, "poll": 0.1, "rate": 20.0, "seconds": 30.0, "rounds": 1},
        "machine": {"date": "2026-12-06T08:00:00+00:00", "cpus": 2},
        "command": "python -m bench.serving",
    }
    text = serving.render(result)
    assert "| operator | 3 | 21.00 | 21.00 | 11.00 - 21.00 | 6.00 | 6.00 |" in text
    assert "**operator / hand-written, p50: 1.00x** (goal <= 1.10x: met)" in text
    assert "99.00" not in text  # the warm-up is not counted
    assert "| 64 MiB | 1 | 0.20 | 320.0 | 320.0 - 320.0 | 1.00 |" in text
    assert "NetworkPolicies in the namespace during the rounds: none" in text
    assert "shared machine" in text.lower()


def test_usage_is_the_operators_cpu_and_the_machines_busy_cpus_between_two_readings() -> None:
    got = serving.usage_since((100.0, 2.0, 500.0), (110.0, 2.5, 515.0))
    assert got == {"operator_cpu_seconds": 0.5, "machine_busy_cpus": 1.5}


def test_the_command_in_the_doc_leaves_out_where_the_json_went() -> None:
    assert (
        common.command_line("bench.serving", ["--runs", "3", "--json", "/somewhere/x.json"])
        == "python -m bench.serving --runs 3"
    )
    assert common.command_line("bench.serving", ["--json=/x.json"]) == "python -m bench.serving"
