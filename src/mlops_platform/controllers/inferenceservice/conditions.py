"""metav1.Condition bookkeeping: ``lastTransitionTime`` moves only when a condition's status flips."""

from __future__ import annotations

import datetime
from typing import Any

Condition = dict[str, Any]


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge(
    previous: list[Condition], wanted: list[Condition], *, generation: int, now: str | None = None
) -> list[Condition]:
    """The new condition list: ``wanted`` (type, status, reason, message) in order, keeping each
    previous ``lastTransitionTime`` when its status did not change."""
    old = {c.get("type"): c for c in previous}
    stamp = now or now_rfc3339()
    out: list[Condition] = []
    for c in wanted:
        prev = old.get(c["type"])
        flipped = prev is None or prev.get("status") != c["status"]
        out.append(
            {
                "type": c["type"],
                "status": c["status"],
                "reason": c["reason"],
                "message": c.get("message", ""),
                "lastTransitionTime": stamp
                if prev is None or flipped
                else prev.get("lastTransitionTime", stamp),
                "observedGeneration": generation,
            }
        )
    return out
