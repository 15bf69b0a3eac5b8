"""The simulated-usage table of the local cluster (devcluster.usage): pure parts, no cluster."""

from __future__ import annotations

import json

import pytest

from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.devcluster import usage


def test_a_load_of_an_inferenceservice_selects_all_its_pods_by_its_label() -> None:
    load = usage.for_inferenceservice("ns", "bert", cpu=0.9)
    assert load.selector == ((labels.INFERENCESERVICE, "bert"),)
    assert load.key == ("ns", ((labels.INFERENCESERVICE, "bert"),))
    assert load.memory is None


def test_the_table_round_trips_through_the_objects_annotation() -> None:
    table = [
        usage.for_inferenceservice("a", "x", cpu=1.2),
        usage.make("b", {"app": "y", "tier": "web"}, memory=0.5),
    ]
    obj = usage.manifest(table)
    assert obj["metadata"]["name"] == usage.NAME
    assert obj["kind"] == "ClusterResourceUsage" and obj["apiVersion"] == usage.KWOK_API_VERSION
    assert "selector" not in obj["spec"]  # the only object: it matches every pod
    assert usage.loads_of(obj) == table
    assert json.loads(obj["metadata"]["annotations"][usage.LOADS_ANNOTATION])[1] == {
        "namespace": "b",
        "selector": {"app": "y", "tier": "web"},
        "memory": 0.5,
    }
    assert usage.loads_of(None) == [] and usage.loads_of({"metadata": {}}) == []


def test_expressions_annotation_first_then_loads_in_order_then_idle() -> None:
    table = [usage.for_inferenceservice("ns", "bert", cpu=1.5), usage.make("ns", {"app": "b"}, cpu=0.25)]
    cpu = usage.expression("cpu", table)
    lines = cpu.splitlines()
    assert lines[0] == '"kwok.x-k8s.io/usage-cpu" in pod.metadata.annotations'
    assert lines[1] == '? Quantity(pod.metadata.annotations["kwok.x-k8s.io/usage-cpu"])'
    assert lines[2] == (
        ': pod.metadata.namespace == "ns" && "mlops.platform/inferenceservice" in pod.metadata.labels'
        ' && pod.metadata.labels["mlops.platform/inferenceservice"] == "bert"'
        ' && "cpu" in container.resources.requests'
    )
    assert lines[3] == '? container.resources.requests["cpu"] * 1.5'
    assert lines[5] == '? container.resources.requests["cpu"] * 0.25'
    assert lines[-1] == ': Quantity("1m")'
    # a load without a memory fraction leaves memory idle: the memory expression skips it
    memory = usage.expression("memory", table)
    assert "mlops.platform/inferenceservice" not in memory
    assert memory.splitlines()[-1] == ': Quantity("1Mi")'


def test_strings_are_quoted_as_cel_literals() -> None:
    cpu = usage.expression("cpu", [usage.make("ns", {"a": 'x"y'}, cpu=1.0)])
    assert '== "x\\"y"' in cpu
    assert "* 1.0" in cpu  # a double literal, never an int


def test_a_fraction_out_of_range_or_no_selector_is_refused() -> None:
    with pytest.raises(ValueError, match="fraction"):
        usage.for_inferenceservice("ns", "x", cpu=-0.1)
    with pytest.raises(ValueError, match="label"):
        usage.make("ns", {}, cpu=0.5)
