"""What every reliability scenario (``tests/reliability``, ``docs/reliability.md``) starts from and
reports with, so that the scenarios differ only in the fault they inject and what they check:

- :class:`Scenario` (the ``scenario`` fixture of ``tests/reliability/conftest.py``): the admin
  client, the test's namespace with the CRD installed against the session's conversion webhook,
  the kubeconfig and a directory for the operator processes' logs; :meth:`Scenario.seeded`, the
  scenario's seed (printed, so that ``MLOPS_RELIABILITY_SEED`` replays a run) and its random
  generator; :meth:`Scenario.report`, its line of the published table.
- :func:`model_uri` and :func:`one_replica`: the model URIs the scenarios write and their
  InferenceServices (torchserve, one replica: the predictors of every scenario fit the kwok nodes).
- :func:`expected`: the audit's expectations (:class:`reliability.Expected`) from the last model URI
  written to each object.
- :func:`work`: an operator process's work not done (queue depth and busy workers, its /metrics).
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable, Mapping
from pathlib import Path

from mlops_platform.controllers.inferenceservice import controller
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import isvc, operator, reliability

#: a one-replica InferenceService: ``one_replica(name, modelUri=...)`` (v1alpha1, as ``isvc.manifest``)
one_replica = functools.partial(isvc.manifest, framework="torchserve", minReplicas=1, maxReplicas=1)


def model_uri(name: str, tag: object) -> str:
    """The model URI ``tag`` (a version, a rollout, a writer's write) of the InferenceService ``name``."""
    return f"s3://models/{name}/{tag}"


def expected(uris: Mapping[str, str]) -> dict[str, reliability.Expected]:
    """Each object present, its Deployment at the model URI ``uris`` gives it."""
    return {name: reliability.Expected(model_uri=uri) for name, uri in uris.items()}


async def work(proc: operator.Process) -> int:
    """The operator process's work not done: its controller's queue depth plus its busy workers."""
    name = controller.NAME
    depth = await proc.metric(f'workqueue_depth{{controller="{name}",name="{name}"}}')
    active = await proc.metric(f'controller_runtime_active_workers{{controller="{name}"}}')
    return int((depth or 0) + (active or 0))


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One reliability test's cluster side (see the module docstring)."""

    client: rclient.Client
    namespace: str
    kubeconfig: Path
    logs: Path
    add_row: Callable[[reliability.Row], None]

    def seeded(self, what: str, sizes: str = "") -> tuple[int, random.Random]:
        """The seed of the scenario's random choices (:func:`reliability.seed`: printed with its
        ``sizes``) and a generator drawing from it."""
        value = reliability.seed(what, sizes)
        return value, random.Random(value)

    def report(
        self,
        scenario: str,
        repetitions: int,
        faults: str,
        checked: reliability.Converged | int,
        notes: str,
        *,
        max_converge_s: float | None = None,
    ) -> None:
        """The scenario's line of the table. ``checked``: the last audit (its InferenceServices and
        children are counted; its time is the converge time unless ``max_converge_s`` says the
        slowest repetition's), or a count of objects checked some other way."""
        seconds = max_converge_s
        if isinstance(checked, reliability.Converged):
            seconds = checked.seconds if max_converge_s is None else max_converge_s
            checked = checked.audit.checked + checked.audit.children
        self.add_row(
            reliability.Row(scenario, repetitions, faults, checked, max_converge_s=seconds, notes=notes)
        )
