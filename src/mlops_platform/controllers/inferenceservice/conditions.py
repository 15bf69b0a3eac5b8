"""Conditions of the InferenceService status: one typed :class:`Condition` and the metav1.Condition
bookkeeping (``lastTransitionTime`` moves only when a condition's status flips)."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Iterable
from typing import Any, Literal

from mlops_platform.runtime import clock

Status = Literal["True", "False", "Unknown"]


@dataclasses.dataclass(frozen=True, slots=True)
class Condition:
    """One aspect of the observed state (reason is CamelCase)."""

    type: str
    status: Status
    reason: str
    message: str = ""


def now_rfc3339(wall: Callable[[], datetime.datetime] = clock.utcnow) -> str:
    """The wall clock's time as a ``metav1.Time`` (whole seconds, :func:`clock.rfc3339`)."""
    return clock.rfc3339(wall())


def merge(
    previous: list[dict[str, Any]], wanted: Iterable[Condition], *, generation: int, now: str | None = None
) -> list[dict[str, Any]]:
    """The new condition list (as written to the API): ``wanted`` in order, keeping each previous
    ``lastTransitionTime`` when its status did not change."""
    old = {c.get("type"): c for c in previous}
    stamp = now or now_rfc3339()
    out: list[dict[str, Any]] = []
    for c in wanted:
        prev = old.get(c.type)
        flipped = prev is None or prev.get("status") != c.status
        out.append(
            {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": stamp
                if flipped or prev is None
                else prev.get("lastTransitionTime", stamp),
                "observedGeneration": generation,
            }
        )
    return out
