"""kwok Stages for tests: make chosen pods misbehave on the fake nodes."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from mlops_platform.runtime.transport import client as rclient

STAGE_API_VERSION = "kwok.x-k8s.io/v1alpha1"


def crashloop_stage(
    name: str, namespace: str, label: str, value: str, *, reason: str = "CrashLoopBackOff"
) -> dict[str, Any]:
    """A Stage that keeps pods of ``namespace`` labelled ``label=value`` Running but never Ready,
    their containers waiting with ``reason`` (default CrashLoopBackOff) and restarting.

    Its weight beats kwok's default pod-ready stage, which then no longer matches (phase Running).
    """
    return {
        "apiVersion": STAGE_API_VERSION,
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.namespace", "operator": "In", "values": [namespace]},
                    {"key": f'.metadata.labels["{label}"]', "operator": "In", "values": [value]},
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                ]
            },
            "weight": 10000,
            "next": {
                "statusTemplate": _CRASH_TEMPLATE.replace("__REASON__", reason),
            },
        },
    }


_CRASH_TEMPLATE = """{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: ContainersNotReady
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: ContainersNotReady
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  started: false
  restartCount: 5
  lastState:
    terminated:
      exitCode: 1
      reason: Error
      finishedAt: {{ $now | Quote }}
      startedAt: {{ $now | Quote }}
  state:
    waiting:
      reason: __REASON__
      message: back-off restarting failed container
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" )
  ( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""


def not_ready_stage(name: str, namespace: str, label: str, value: str) -> dict[str, Any]:
    """A Stage that keeps pods of ``namespace`` labelled ``label=value`` Running and started (the
    startup probe passed) but never Ready: a readiness probe that keeps failing."""
    stage = crashloop_stage(name, namespace, label, value)
    stage["spec"]["next"]["statusTemplate"] = _NOT_READY_TEMPLATE
    return stage


_HEAD, _, _CRASH_CONTAINERS_AND_TAIL = _CRASH_TEMPLATE.partition("containerStatuses:\n")
#: after the containers: the pod's IPs, phase and start time (the same for every stage here)
_POD_TAIL = _CRASH_CONTAINERS_AND_TAIL[_CRASH_CONTAINERS_AND_TAIL.index("{{ end }}") :]
_NOT_READY_TEMPLATE = (
    _HEAD
    + """containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
"""
    + _POD_TAIL
)


def init_failure_stage(
    name: str,
    namespace: str,
    label: str,
    value: str,
    message: str,
    *,
    crashloop: bool = False,
    extra_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Stage that fails the init containers of pods of ``namespace`` labelled ``label=value``
    (and ``extra_selector``'s labels) as the kubelet reports it: the pod stays ``Pending``, each
    init container terminated with exit code 1 and ``message`` as its termination message
    (``Init:Error``), or with ``crashloop`` waiting in ``CrashLoopBackOff`` after that run
    (``Init:CrashLoopBackOff``); the containers wait in ``PodInitializing``.

    The pod still matches the selector once the stage applied (it stays Pending), and so it keeps
    beating kwok's pod-ready stage; the status has no timestamps, so applying it again changes
    nothing and kwok writes nothing more.
    """
    stage = crashloop_stage(name, namespace, label, value)
    for key, wanted in (extra_selector or {}).items():
        stage["spec"]["selector"]["matchExpressions"].append(
            {"key": f'.metadata.labels["{key}"]', "operator": "In", "values": [wanted]}
        )
    terminated = (
        f"terminated:\n      exitCode: 1\n      reason: Error\n      message: {json.dumps(message + chr(10))}"
    )
    state = (
        "state:\n    waiting:\n      reason: CrashLoopBackOff\n"
        "      message: back-off 10s restarting failed container\n"
        f"  lastState:\n    {terminated}"
        if crashloop
        else f"state:\n    {terminated}"
    )
    stage["spec"]["next"]["statusTemplate"] = _INIT_FAILED_TEMPLATE.replace("__STATE__", state)
    return stage


_INIT_FAILED_TEMPLATE = """conditions:
- status: "False"
  reason: ContainersNotInitialized
  type: Initialized
- status: "False"
  reason: ContainersNotReady
  type: Ready
- status: "False"
  reason: ContainersNotReady
  type: ContainersReady
initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 1
  __STATE__
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  state:
    waiting:
      reason: PodInitializing
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" )
  ( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
phase: Pending
"""


@contextlib.asynccontextmanager
async def installed(client: rclient.Client, stage: dict[str, Any]) -> AsyncIterator[None]:
    """``stage`` exists for the duration of the block (created, then deleted whatever happens)."""
    res = await client.resource_for(STAGE_API_VERSION, "Stage")
    await client.create(res, stage)
    try:
        yield
    finally:
        await client.delete(res, stage["metadata"]["name"])
