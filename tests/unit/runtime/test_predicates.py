"""Event filters: which informer events enqueue a reconcile."""

from __future__ import annotations

from typing import Any

from mlops_platform.runtime.control import predicates


def _obj(
    generation: int = 1, labels: dict[str, str] | None = None, rv: str = "1", **ann: str
) -> dict[str, Any]:
    return {
        "metadata": {
            "generation": generation,
            "labels": labels or {},
            "annotations": ann,
            "resourceVersion": rv,
        }
    }


def test_generation_changed_drops_status_only_updates_but_keeps_resyncs() -> None:
    p = predicates.generation_changed()
    old = _obj(generation=1, rv="1")
    assert not p.update(old, _obj(generation=1, rv="2"))  # a status write
    assert p.update(old, _obj(generation=2, rv="3"))  # a spec edit
    assert p.update(old, old)  # resync re-delivers the same object
    assert p.create(old)
    assert p.delete(old)


def test_label_annotation_and_resource_version_predicates() -> None:
    assert predicates.labels_changed().update(_obj(labels={"a": "1"}), _obj(labels={"a": "2"}))
    assert not predicates.labels_changed().update(_obj(labels={"a": "1"}), _obj(labels={"a": "1"}, rv="9"))
    assert predicates.annotations_changed().update(_obj(x="1"), _obj(x="2"))
    assert not predicates.annotations_changed().update(_obj(x="1"), _obj(x="1", rv="2"))
    assert predicates.resource_version_changed().update(_obj(rv="1"), _obj(rv="2"))
    assert not predicates.resource_version_changed().update(_obj(rv="1"), _obj(rv="1"))


def test_combinators() -> None:
    gen, lab = predicates.generation_changed(), predicates.labels_changed()
    label_edit = (_obj(labels={"a": "1"}), _obj(labels={"a": "2"}, rv="2"))
    assert predicates.any_of(gen, lab).update(*label_edit)
    assert not predicates.all_of(gen, lab).update(*label_edit)
    assert predicates.all_of(gen) is gen  # a single predicate is not wrapped
    assert predicates.all_of().update(*label_edit)  # none: everything passes
