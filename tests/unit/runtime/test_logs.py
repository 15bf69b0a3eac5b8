"""JSON-lines logging: stable keys and order, context isolation across tasks, exceptions."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from mlops_platform.runtime.observability.logs import current_context, log_context, setup_logging

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved_level = root.level
    buf = io.StringIO()
    handler = setup_logging(level="debug", stream=buf)
    yield buf
    root.removeHandler(handler)
    root.setLevel(saved_level)


def lines(buf: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_core_keys_come_first_in_a_stable_order(stream: io.StringIO) -> None:
    logging.getLogger("mlops.test").info("hello %s", "world", extra={"attempt": 2, "ok": True})
    [doc] = lines(stream)
    assert list(doc) == ["ts", "level", "logger", "msg", "attempt", "ok"]
    assert doc["level"] == "info"
    assert doc["logger"] == "mlops.test"
    assert doc["msg"] == "hello world"
    assert TS.match(str(doc["ts"]))


def test_context_keys_follow_core_keys_and_precede_extras(stream: io.StringIO) -> None:
    log = logging.getLogger("mlops.test")
    with log_context(reconcile_id="r-1", controller="isvc", name="m", namespace="ns"):
        log.warning("reconciling", extra={"generation": 3})
        with log_context(name="other"):
            log.debug("nested")
        log.error("after")
    log.info("outside")
    first, nested, after, outside = lines(stream)
    assert list(first) == [
        "ts",
        "level",
        "logger",
        "msg",
        "controller",
        "namespace",
        "name",
        "reconcile_id",
        "generation",
    ]
    assert (first["controller"], first["namespace"], first["name"], first["reconcile_id"]) == (
        "isvc",
        "ns",
        "m",
        "r-1",
    )
    assert nested["name"] == "other"
    assert nested["controller"] == "isvc"
    assert after["name"] == "m"
    assert list(outside) == ["ts", "level", "logger", "msg"]
    assert current_context() == {}


def test_extra_clashing_with_core_keys_is_renamed(stream: io.StringIO) -> None:
    with log_context(namespace="ctx"):
        logging.getLogger("t").info("m", extra={"ts": "x", "level": "y", "namespace": "override"})
    [doc] = lines(stream)
    assert doc["level"] == "info"
    assert doc["extra_ts"] == "x"
    assert doc["extra_level"] == "y"
    assert doc["namespace"] == "override"


def test_values_are_made_json_safe(stream: io.StringIO) -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque!"

    cyclic: list[object] = []
    cyclic.append(cyclic)
    extra = {"obj": Opaque(), "keyed": {(1, 2): "tuple key"}, "cyclic": cyclic, "n": None}
    logging.getLogger("t").info("m", extra=extra)
    [doc] = lines(stream)
    assert doc["obj"] == "opaque!"
    assert doc["keyed"] == {"(1, 2)": "tuple key"}
    assert doc["cyclic"] == "[[...]]"  # only the field the encoder cannot handle is stringified
    assert doc["n"] is None


def test_exceptions_carry_error_and_stacktrace(stream: io.StringIO) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("t").exception("failed", extra={"step": "x"})
    [doc] = lines(stream)
    assert list(doc)[-3:] == ["step", "error", "stacktrace"]
    assert doc["level"] == "error"
    assert doc["error"] == "ValueError: boom"
    assert "Traceback (most recent call last)" in str(doc["stacktrace"])
    assert "raise ValueError" in str(doc["stacktrace"])


async def test_context_is_isolated_between_tasks(stream: io.StringIO) -> None:
    log = logging.getLogger("t")
    both_bound = asyncio.Barrier(2)

    async def reconcile(name: str) -> None:
        with log_context(controller="c", name=name, reconcile_id=f"id-{name}"):
            await both_bound.wait()  # the two bindings overlap in time
            log.info("step")
            await asyncio.sleep(0)
            log.info("step")

    with log_context(namespace="outer"):
        await asyncio.gather(reconcile("a"), reconcile("b"))
        log.info("parent")
    docs = [d for d in lines(stream) if d["logger"] == "t"]
    for doc in docs[:4]:
        assert doc["reconcile_id"] == f"id-{doc['name']}"
        assert doc["namespace"] == "outer"  # inherited from the parent context
    assert sorted(str(d["name"]) for d in docs[:4]) == ["a", "a", "b", "b"]
    assert "name" not in docs[4]
    assert docs[4]["namespace"] == "outer"


def test_setup_logging_is_idempotent_and_supports_text() -> None:
    root = logging.getLogger()
    saved_level = root.level
    first, second = io.StringIO(), io.StringIO()
    setup_logging(level="info", stream=first)
    handler = setup_logging(level="info", stream=second, json=False)
    try:
        with log_context(controller="c"):
            logging.getLogger("t").info("plain %d", 1)
        logging.getLogger("t").debug("filtered out")
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_level)
    assert handler not in root.handlers
    assert first.getvalue() == ""
    [line] = second.getvalue().splitlines()
    assert re.match(r"^\S+Z INFO +t plain 1 controller=c$", line)
