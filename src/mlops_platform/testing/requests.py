"""What a client wrote while a test watched: the writes of one namespace (and object names), so
that a "steady state makes no writes" test counts the object under test, not a neighbour that
another test left behind (a namespace being terminated, an object being garbage-collected)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from collections.abc import Callable, Iterator

from mlops_platform.runtime.transport import client as rclient

#: the verbs that change the cluster (``apply`` is a ``patch`` on the wire)
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclasses.dataclass
class Recorder:
    """Every request a client finished while recording, in order."""

    records: list[rclient.RequestRecord] = dataclasses.field(default_factory=list)

    def observe(self, record: rclient.RequestRecord) -> None:
        self.records.append(record)

    def writes(
        self, namespace: str | None = None, *, names: Callable[[str | None], bool] | None = None
    ) -> collections.Counter[tuple[str, str, str | None]]:
        """The writes, by (verb, resource, name), to ``namespace`` (None: anywhere) and, if given,
        to objects whose name ``names`` accepts."""
        return collections.Counter(
            (r.verb, r.resource, r.name)
            for r in self.records
            if r.verb in WRITE_VERBS
            and (namespace is None or r.namespace == namespace)
            and (names is None or names(r.name))
        )


@contextlib.contextmanager
def recording(client: rclient.Client) -> Iterator[Recorder]:
    """Record the requests ``client`` makes inside the block."""
    recorder = Recorder()
    client.observers.append(recorder.observe)
    try:
        yield recorder
    finally:
        client.observers.remove(recorder.observe)


def owned_by(name: str) -> Callable[[str | None], bool]:
    """A name filter for the objects of the InferenceService ``name``: itself and its children
    (``name``, ``name-predictor``, ``name-canary``, ...) and their Events (``name.<hash>``)."""
    return lambda n: n is not None and (n == name or n.startswith((f"{name}-", f"{name}.")))
