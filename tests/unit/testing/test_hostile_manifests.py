"""The hostile-input strategies keep their promise: every drawn "invalid" spec is invalid by the API's
own contract (:func:`mlops_platform.api.decode` refuses it), so the reliability suite's scenario 9
never reports a valid manifest as one the API server accepted by mistake.

Metadata (names, labels, annotations) and unknown fields are the API server's to refuse (decode
reads only the spec, and tolerates unknown fields as the server does without Strict validation):
those cases are checked against the real server in ``tests/reliability/test_hostile_input.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlops_platform import api
from mlops_platform.runtime import quantity
from mlops_platform.testing import manifests
from mlops_platform.testing.manifests import mutations, objects, values


def test_every_bad_quantity_sample_is_refused_by_the_quantity_pattern() -> None:
    """Each sample, not only those hypothesis happens to draw ("1." was listed and is valid)."""
    accepted = [q for q in manifests.BAD_QUANTITY_SAMPLES if quantity.is_quantity(q)]
    assert not accepted, f"listed as bad quantities but valid: {accepted}"
    assert quantity.is_quantity("1.")  # as apimachinery's ParseQuantity: an empty fraction is 1


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(manifests.invalid(huge=False))
def test_every_invalid_spec_is_refused_by_decode(inv: manifests.Invalid) -> None:
    if inv.strict or not inv.field.startswith("spec"):
        return
    try:
        api.decode(inv.obj)
    except api.ValidationError:
        return
    raise AssertionError(f"drawn as invalid but valid: {inv.describe()}")


@given(values.not_of_type("quantity"))
def test_a_wrong_type_for_a_quantity_is_neither_a_string_nor_an_integer(value: object) -> None:
    """A v1alpha1 quantity is int-or-string (``cpuRequest: 471`` is 471 CPUs): CI once drew that as a
    wrong type, and the API server rightly accepted it (seed 143006)."""
    assert not isinstance(value, str | int) or isinstance(value, bool)


_ANALYSIS_FIELDS = {
    v: tuple(f for f in manifests.FIELDS[v] if f.path[:3] == ("spec", "canary", "analysis"))
    for v in ("v1beta1", "v1")
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_analysis_field_made_invalid_is_refused_by_decode_naming_it(data: st.DataObject) -> None:
    """The analysis' rows of the tables (issue 42), drawn alone: each is refused, naming its field."""
    version = data.draw(st.sampled_from(sorted(_ANALYSIS_FIELDS)))
    obj = data.draw(objects.base(version))
    with pytest.MonkeyPatch.context() as m:
        m.setitem(manifests.FIELDS, version, _ANALYSIS_FIELDS[version])
        inv = data.draw(mutations._field_mutation(version, obj))
    with pytest.raises(api.ValidationError) as e:
        api.decode(inv.obj)
    assert inv.field.split(".")[-1] in str(e.value), (inv.describe(), str(e.value))


@pytest.mark.parametrize("case", sorted(mutations._ANALYSIS_CASES))
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_broken_analysis_rule_is_refused_by_decode_naming_its_field(
    case: str, data: st.DataObject
) -> None:
    version = data.draw(st.sampled_from(["v1beta1", "v1"]))
    inv = mutations._broken_analysis(version, data.draw(objects.base(version)), case)
    with pytest.raises(api.ValidationError) as e:
        api.decode(inv.obj)
    assert inv.field in str(e.value), (inv.describe(), str(e.value))
