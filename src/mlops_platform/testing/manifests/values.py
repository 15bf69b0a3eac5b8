"""Hostile values for the manifests of :mod:`mlops_platform.testing.manifests` (Hypothesis
strategies and samples): values of the wrong JSON type, integers out of range, quantities Kubernetes
refuses, strings that miss a pattern, model URIs the schema or :func:`mlops_platform.api.modeluri.parse`
refuses, and names, label keys and values with unicode tricks. Every value drawn is invalid where it is
put; which field it goes to is :mod:`~mlops_platform.testing.manifests.fields`' business.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import strategies as st

from mlops_platform.api import v1alpha1
from mlops_platform.runtime import quantity

INT64 = 2**63
_WRONG_TYPES: dict[str, st.SearchStrategy[Any]] = {
    "string": st.text(max_size=8),
    "boolean": st.booleans(),
    "array": st.lists(st.integers(0, 9), max_size=3),
    "object": st.dictionaries(st.sampled_from(["a", "value"]), st.integers(0, 9), max_size=2),
    "number": st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not float(f).is_integer()),
    "integer": st.integers(-(2**31), 2**31),
}


def short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 60 else f"{text[:40]}...({len(text)} chars)"


def not_of_type(json_type: str) -> st.SearchStrategy[Any]:
    """A value of any JSON type but ``json_type``: an integer is a number too, and an integer field
    also gets its digits in a string (an integral float is an integer in JSON: not drawn). A
    ``quantity`` is int-or-string (``x-kubernetes-int-or-string``): neither is a wrong type."""
    excluded = {
        "number": {"number", "integer"},
        "quantity": {"string", "integer"},
    }.get(json_type, {json_type})
    others = [s for name, s in _WRONG_TYPES.items() if name not in excluded]
    if json_type == "integer":
        others.append(st.integers(-1000, 100000).map(str))
    return st.one_of(others)


def out_of_range(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Integers just outside [lo, hi], far outside, and at the edges of int64."""
    return st.one_of(
        st.integers(lo - 5, lo - 1),
        st.integers(hi + 1, hi + 5),
        st.integers(-(INT64 - 1), lo - 1),
        st.integers(hi + 1, INT64 - 1),
        st.sampled_from([-(INT64 - 1), INT64 - 1]),
    )


#: quantities the pattern and Kubernetes' parser refuse; unicode digits and spaces among them ("1."
#: is not one: apimachinery's ParseQuantity reads it as 1, an empty fraction, and so does the pattern)
BAD_QUANTITY_SAMPLES = (
    "lots", "-1", "1.5.5", "", " 1", "1 ", "1Ki ", "Infinity", "NaN", "0x10", "1_000", "1e", "e3",
    "1KiB", "1mi", "+", "--1", "\u0661", "\uff11", "1\u00a0Gi", "1\u200bGi", "1ki", "1Kb",
)  # fmt: skip


def bad_quantity() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(BAD_QUANTITY_SAMPLES),
        st.text(min_size=1, max_size=12).filter(lambda s: not quantity.is_quantity(s)),
        st.integers(-(INT64 - 1), -1),
        st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not float(f).is_integer()),
        st.booleans(),
        st.just("1" * 65),  # over the 64 characters a quantity may have
    )


def text_not_matching(pattern: str, *, max_size: int = 20) -> st.SearchStrategy[str]:
    regex = re.compile(pattern)
    return st.text(max_size=max_size).filter(lambda s: regex.search(s) is None)


# -- bad model URIs: the schema's pattern and modeluri.parse --------------------------------------

BAD_URIS = (
    "ftp://host/m",
    "s3:/bucket/m",
    "bucket/model",
    "s3://",
    "S3://bucket/m",
    "s3://bucket/../m",
    "s3://bucket/a/./m",
    "gs://Bucket/m",
    "gs://bu\u0441ket/m",  # a Cyrillic 's'
    "s3://bucket/m odel",
    "s3://bucket/m\tx",
    "s3://bucket/m\n",
    "s3://b_/m",
    "s3://-bucket/m",
    "pvc://Claim/m",
    "pvc://claim_1/m",
    "pvc://claim/../m",
    "file://relative/path",
    "file:///",
    "file:///models/../etc",
    "https://",
    "https:///m",
    "https://host",
    "https://host/",
    "http://host?x=1",
)


def bad_uri() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(BAD_URIS),
        # anything with a scheme the operator does not download from
        st.from_regex(r"\A[a-z]{2,6}://[a-z]{1,8}/[a-z]{1,8}\Z").filter(
            lambda u: not re.match(v1alpha1.MODEL_URI_PATTERN, u)
        ),
    )


# -- names and labels --------------------------------------------------------------------------------

BAD_NAMES = (
    "Model",
    "m\u043edel",  # a Cyrillic 'o'
    "mo\u200bdel",  # a zero-width space
    "ab\u202ecd",  # a right-to-left override
    "model\u0301",  # a combining accent
    "\uff4d\uff4f\uff44\uff45\uff4c",  # fullwidth letters
    "m\u00f6del",
    "model-",
    "-model",
    "1model",
    "my.model",
    "my_model",
    "a" * 54,
    "a" * 254,
    "\U0001f916",
)
BAD_LABEL_VALUES = ("m\u043edel", "a\u200bb", "-x", "x-", "a b", "a" * 64, "\u00e9", "a/b", "\U0001f916")
BAD_LABEL_KEYS = ("a b", "m\u043edel", "-x", "example.com/", "/x", "a" * 64, "Example.com/x\u200b", "a/b/c")
