"""Another writer's edit of an InferenceService's status is written back: the primary kind passes
it to a reconcile, while the echoes of the operator's own status writes stay filtered (the full
conflicts scenario found a Ready condition stomped through the status subresource left for the
10 h resync)."""

from __future__ import annotations

from typing import Any

from mlops_platform.controllers.inferenceservice.own_writes import OwnStatus


def _cr(rv: int, ready: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "m", "resourceVersion": str(rv), "generation": 1},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def _passes(own: OwnStatus, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """The primary kind's order: OwnStatus first (it notes an echo), then the foreign predicate."""
    assert own.update(old, new)
    return own.foreign_status().update(old, new)


def test_a_foreign_status_edit_passes_and_our_own_echoes_do_not() -> None:
    own = OwnStatus()
    own.wrote(_cr(1, "False"), _cr(2, "True"))
    assert not _passes(own, _cr(1, "False"), _cr(2, "True"))  # our echo
    assert _passes(own, _cr(2, "True"), _cr(3, "False"))  # someone stomped Ready
    assert not _passes(own, _cr(3, "False"), {**_cr(4, "False"), "spec": {}})  # status unchanged
    resync = _cr(4, "True")
    assert not _passes(own, resync, resync)


def test_two_quick_writes_of_our_own_are_both_echoes() -> None:
    own = OwnStatus()
    own.wrote(_cr(1, "False"), _cr(2, "True"))
    own.wrote(_cr(2, "True"), _cr(3, "False"))
    assert not _passes(own, _cr(1, "False"), _cr(2, "True"))
    assert not _passes(own, _cr(2, "True"), _cr(3, "False"))
    assert _passes(own, _cr(3, "False"), _cr(4, "True"))  # nothing of ours pending: foreign


def test_another_writers_event_forgets_our_older_pending_versions() -> None:
    own = OwnStatus()
    own.wrote(_cr(1, "False"), _cr(2, "True"))
    own.wrote(_cr(2, "True"), _cr(3, "False"))
    assert not _passes(own, _cr(1, "False"), _cr(2, "True"))  # ours; rv 3 still pending
    assert _passes(own, _cr(2, "True"), _cr(4, "Unknown"))  # another writer's (a relist folded ours)
    assert _passes(own, _cr(4, "Unknown"), _cr(3, "False"))  # nothing of ours kept: no stale memory
