"""The reconciler's memo of settled inputs: what it need not decide again (docs/design.md, "Settled
inputs are not decided twice")."""

from __future__ import annotations

import dataclasses

from mlops_platform.api import internal

#: an InferenceService's (namespace, name)
Key = tuple[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class _Settled:
    inputs: tuple[object, ...]
    isvc: internal.InferenceService


class SettledInputs:
    """Per InferenceService, the inputs under which its last reconcile's decisions hold, and the CR
    decoded at their version.

    The inputs are everything a reconcile decides from, the CR's resourceVersion first
    (:meth:`~.reconciler.InferenceServiceReconciler._inputs`): equal inputs give equal decisions.

    Invariant: the inputs a key holds are ones from which deciding again writes nothing (no child,
    no status) and requeues nothing, and ``isvc`` is the CR decoded and validated at the
    resourceVersion they start with. A reconcile settles only when nothing failed, its own writes
    did not change the rollout it decided from, and its status landed on the generation it decoded;
    what it settles are the inputs its writes left (the objects they answered with), which the next
    reconcile reads once the watches deliver them. The other endings forget the key (the CR gone,
    an invalid spec, a failed write or a permission problem, a requeue, a newer generation), which
    is always safe: the next reconcile decides anew. A status write that fails raises before
    either: the entry, if any, is an earlier reconcile's and still holds.
    """

    def __init__(self) -> None:
        self._settled: dict[Key, _Settled] = {}

    def decoded(self, key: Key, version: object) -> internal.InferenceService | None:
        """The CR decoded already, when ``version`` (its resourceVersion) is the settled one."""
        settled = self._settled.get(key)
        return settled.isvc if settled is not None and settled.inputs[0] == version else None

    def holds(self, key: Key, inputs: tuple[object, ...]) -> bool:
        """Whether ``inputs`` are exactly the settled ones: the same decisions again, nothing to
        build, compare or write (a resync, a no-op event)."""
        settled = self._settled.get(key)
        return settled is not None and settled.inputs == inputs

    def settle(self, key: Key, inputs: tuple[object, ...], isvc: internal.InferenceService) -> None:
        self._settled[key] = _Settled(inputs, isvc)

    def forget(self, key: Key) -> None:
        self._settled.pop(key, None)
