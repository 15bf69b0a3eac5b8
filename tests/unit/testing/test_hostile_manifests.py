"""The hostile-input strategies keep their promise: every drawn "invalid" spec is invalid by the API's
own contract (:func:`mlops_platform.api.decode` refuses it), so the reliability suite's scenario 9
never reports a valid manifest as one the API server accepted by mistake.

Metadata (names, labels, annotations) and unknown fields are the API server's to refuse (decode
reads only the spec, and tolerates unknown fields as the server does without Strict validation):
those cases are checked against the real server in ``tests/reliability/test_hostile_input.py``.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from mlops_platform import api
from mlops_platform.runtime import quantity
from mlops_platform.testing import manifests
from mlops_platform.testing.manifests import values


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
