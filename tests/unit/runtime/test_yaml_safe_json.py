"""Server-side apply bodies are JSON parsed as YAML by the API server: characters YAML refuses raw
(or reads as line breaks) are escaped, and the JSON still means the same strings."""

from __future__ import annotations

import json

import msgspec
import yaml

from mlops_platform.runtime.transport.codec import yaml_safe_json

AWKWARD = "a\x7fb\x80c\x85d\x9fe\u2028f\u2029g\ufffeh\uffffi"


def test_characters_yaml_refuses_or_folds_are_escaped_and_the_string_is_the_same() -> None:
    body = msgspec.json.encode({"metadata": {"labels": {"k": AWKWARD}}, "note": "ünïcödé ✓ 🙂"})
    with_raw = body.decode()
    assert "\x7f" in with_raw and "\u2028" in with_raw  # the JSON encoder leaves them raw
    safe = yaml_safe_json(body)
    assert safe.isascii() is False  # other non-ASCII text stays as it is
    for ch in "\x7f\x80\x85\x9f\u2028\u2029\ufffe\uffff":
        assert ch not in safe.decode()
    assert json.loads(safe) == json.loads(body)
    # a YAML 1.1 parser (what the API server's is) reads the same object from it
    assert yaml.safe_load(safe) == json.loads(body)


def test_a_body_without_them_is_sent_as_it_is() -> None:
    body = msgspec.json.encode({"spec": {"uri": "s3://models/ünï/1"}})
    assert yaml_safe_json(body) is body


def test_an_ascii_body_with_del_is_escaped_too() -> None:
    assert yaml_safe_json(msgspec.json.encode({"k": "a\x7fb"})) == b'{"k":"a\\u007fb"}'
