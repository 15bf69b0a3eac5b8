"""The API server refuses the model URIs the operator's parser refuses (found by the reliability
suite's hostile-input scenario: ``s3://Bucket/m``, ``s3://b/../m``, ``file://relative``,
``https://host`` were stored and only then reported as InvalidSpec), and a malformed IPv6 host is a
:class:`modeluri.ModelURIError` naming the field, not a crash of the reconcile.

The CEL rules are :data:`modeluri.CHECKS` rendered; here each check is evaluated with Python's
``re`` (the RE2-only escapes translated) and must agree with :func:`modeluri.parse` on every URI
the schema's pattern lets through (hypothesis), so the server and the operator say the same."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlops_platform import api
from mlops_platform.api import crd, modeluri, v1alpha1

JSON = dict[str, Any]
#: Unicode white space (category Z), spelled out for Python's ``re`` (RE2: ``\p{Z}``)
_Z = " \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def _python(regex: str) -> re.Pattern[str]:
    """An RE2 regex of :data:`modeluri.CHECKS` as a Python one (``$``: only at the very end)."""
    out = regex.replace(r"\p{Z}", _Z).replace("$", r"\Z")
    out = re.sub(r"\\x\{([0-9a-f]{2})\}", r"\\x\1", out)
    return re.compile(out)


def _server_refuses(uri: str) -> str | None:
    """The first check the URI fails, as the API server would evaluate it, or None."""
    for check in modeluri.CHECKS:
        if check.when is not None and not _python(check.when).search(uri):
            continue
        failed = any(not _python(m).search(uri) for m in check.must)
        if failed or (check.must_not is not None and _python(check.must_not).search(uri)):
            return check.message
    return None


def _parser_refuses(uri: str) -> str | None:
    try:
        modeluri.parse(uri)
    except modeluri.ModelURIError as e:
        return str(e)
    return None


SAMPLES = [
    ("s3://models/bert/7", None),
    ("gs://bucket/iris/2/", None),
    ("pvc://claim.a/m", None),
    ("file:///models/resnet", None),
    ("https://models.example.com/a/b.tar", None),
    ("http://user@host:8080/m?x=1", None),
    ("http://[::1]:8080/m", None),
    ("s3://Bucket/m", "bucket"),
    ("gs://bu\u0441ket/m", "bucket"),
    ("s3://bucket/../m", "segments"),
    ("pvc://claim/./m", "segments"),
    ("file:///models/../etc", "segments"),
    ("pvc://Claim/m", "claim"),
    ("pvc://" + "a" * 254 + "/m", "claim"),
    ("file://relative/path", "absolute path"),
    ("file:///", "absolute path"),
    ("https:///m", "host"),
    ("https://host", "host"),
    ("https://host/", "host"),
    ("https://host?x=1", "host"),
    ("https://[x/m", "host"),
    ("s3://bucket/m odel", "white space"),
    ("s3://bucket/m\u3000", "white space"),
    ("s3://bucket/m\n", "white space"),
]


@pytest.mark.parametrize(("uri", "refused"), SAMPLES)
def test_the_server_rules_and_the_parser_agree_on_samples(uri: str, refused: str | None) -> None:
    server, parser = _server_refuses(uri), _parser_refuses(uri)
    assert (server is None) == (parser is None), (uri, server, parser)
    if refused is not None:
        assert server is not None and refused in server


def test_a_malformed_ipv6_host_is_an_invalid_spec_not_a_crash() -> None:
    with pytest.raises(modeluri.ModelURIError, match="Invalid IPv6 URL"):
        modeluri.parse("https://[x/m")
    obj = {
        "apiVersion": v1alpha1.API_VERSION,
        "kind": v1alpha1.KIND,
        "metadata": {"name": "m", "namespace": "ml"},
        "spec": {"modelUri": "https://[x/m", "framework": "triton"},
    }
    with pytest.raises(api.ValidationError, match=r"spec\.predictor\.model\.uri"):
        api.decode(obj)


_ALPHABET = st.sampled_from(
    ["a", "b", "Z", "0", "-", "_", ".", "..", "/", "@", ":", "?", "#", "%", " ", "\u3000", "\u0441", "\t"]
)


@settings(max_examples=3000, deadline=None, derandomize=True, database=None)
@given(st.sampled_from(["s3", "gs", "pvc", "file", "http", "https"]), st.lists(_ALPHABET, max_size=12))
def test_the_server_rules_and_the_parser_agree(scheme: str, parts: list[str]) -> None:
    uri = f"{scheme}://{''.join(parts)}"
    if not re.match(v1alpha1.MODEL_URI_PATTERN, uri):
        return  # the schema's pattern refuses it already
    assert (_server_refuses(uri) is None) == (_parser_refuses(uri) is None), uri


def _field(schema: JSON, *path: str) -> JSON:
    for key in path:
        schema = schema["properties"][key]
    return schema


def test_every_model_uri_field_of_every_version_carries_the_rules() -> None:
    rules = modeluri.cel_rules()
    versions = {v["name"]: v["schema"]["openAPIV3Schema"] for v in crd.crd_manifest()["spec"]["versions"]}
    assert _field(versions["v1alpha1"], "spec", "modelUri")["x-kubernetes-validations"] == rules
    (traffic,) = _field(versions["v1alpha1"], "spec", "traffic")["x-kubernetes-validations"]
    assert modeluri.cel_condition("self.canaryVersion") in traffic["rule"]
    for version in ("v1beta1", "v1"):
        for model in (("spec", "predictor", "model"), ("spec", "canary", "model")):
            assert _field(versions[version], *model, "uri")["x-kubernetes-validations"] == rules
