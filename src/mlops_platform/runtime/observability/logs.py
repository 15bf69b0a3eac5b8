"""Structured JSON-lines logging on the stdlib :mod:`logging` module.

Contract of a JSON line (one object per record, keys in this order, absent keys omitted):

1. ``ts`` (RFC 3339 UTC, milliseconds: ``2024-05-01T12:00:00.123Z``), ``level`` (lower case:
   ``debug``, ``info``, ``warning``, ``error``, ``critical``), ``logger``, ``msg`` (%-formatted);
2. the context keys ``controller``, ``namespace``, ``name``, ``reconcile_id`` when bound with
   :func:`log_context` (an ``extra=`` field of the same name overrides the value in place);
3. the record's ``extra=`` fields in the order given; one that would clash with a key of (1) or
   (4) is emitted as ``extra_<key>``;
4. ``error`` (``"<ExceptionType>: <message>"``) and ``stacktrace`` when the record carries an
   exception, ``stack`` for ``stack_info``.

Values are made JSON-safe: anything the encoder cannot represent is written as ``str(value)``.
The context lives in a :class:`contextvars.ContextVar`, so it follows ``await`` and is copied into
new asyncio tasks: a binding made inside one task is never visible in another.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import logging
import sys
import traceback
import types
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

import msgspec

from mlops_platform.runtime import clock

__all__ = [
    "CONTEXT_KEYS",
    "JsonFormatter",
    "TextFormatter",
    "current_context",
    "log_context",
    "setup_logging",
]

CONTEXT_KEYS = ("controller", "namespace", "name", "reconcile_id")
_CORE_KEYS = frozenset({"ts", "level", "logger", "msg", "error", "stacktrace", "stack"})
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys() | {"message", "asctime"}
)
_context: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "mlops_platform_log_context", default=types.MappingProxyType({})
)


def _to_str(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


_encoder = msgspec.json.Encoder(enc_hook=_to_str)


def current_context() -> dict[str, str]:
    """The context keys bound in the current context (a copy)."""
    return dict(_context.get())


@contextlib.contextmanager
def log_context(
    *,
    controller: str | None = None,
    namespace: str | None = None,
    name: str | None = None,
    reconcile_id: str | None = None,
) -> Iterator[dict[str, str]]:
    """Bind context keys (``None`` keeps the outer value) for the duration of the block.

    Yields the merged context. Bindings nest and are undone on exit, even on errors.
    """
    given = {"controller": controller, "namespace": namespace, "name": name, "reconcile_id": reconcile_id}
    merged = {**_context.get(), **{k: str(v) for k, v in given.items() if v is not None}}
    token = _context.set(merged)
    try:
        yield dict(merged)
    finally:
        _context.reset(token)


def _timestamp(record: logging.LogRecord) -> str:
    return clock.rfc3339(datetime.datetime.fromtimestamp(record.created, datetime.UTC), 3)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    extras = {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}
    doc: dict[str, Any] = {
        "ts": _timestamp(record),
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    context = _context.get()
    for key in CONTEXT_KEYS:
        if key in extras:
            doc[key] = extras.pop(key)
        elif key in context:
            doc[key] = context[key]
    for key, value in extras.items():
        doc[f"extra_{key}" if key in _CORE_KEYS else key] = value
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        doc["error"] = f"{type(exc).__name__}: {_to_str(exc)}"
        doc["stacktrace"] = "".join(traceback.format_exception(exc)).rstrip()
    elif record.exc_text:
        doc["error"] = record.exc_text
    if record.stack_info:
        doc["stack"] = record.stack_info
    return doc


def _encode(doc: dict[str, Any]) -> str:
    try:
        return _encoder.encode(doc).decode()
    except Exception:  # e.g. non-string dict keys deep inside a value: stringify that field only
        safe: dict[str, Any] = {}
        for key, value in doc.items():
            try:
                _encoder.encode(value)
                safe[key] = value
            except Exception:
                safe[key] = _to_str(value)
        return _encoder.encode(safe).decode()


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object (see the module docstring for the keys)."""

    def format(self, record: logging.LogRecord) -> str:
        return _encode(_fields(record))


class TextFormatter(logging.Formatter):
    """Human-readable: ``ts level logger msg key=value ...`` plus the stack trace on errors."""

    def format(self, record: logging.LogRecord) -> str:
        doc = _fields(record)
        head = f"{doc.pop('ts')} {doc.pop('level').upper():<7} {doc.pop('logger')} {doc.pop('msg')}"
        trace = doc.pop("stacktrace", None)
        tail = " ".join(f"{k}={v}" for k, v in doc.items())
        line = f"{head} {tail}" if tail else head
        return f"{line}\n{trace}" if trace else line


class _Handler(logging.StreamHandler[TextIO]):
    """Marks the handler :func:`setup_logging` installed, so a second call replaces it."""


def setup_logging(
    level: str | int = "info", stream: TextIO | None = None, json: bool = True
) -> logging.Handler:
    """Send the root logger's records to ``stream`` (default ``sys.stderr``) as JSON lines or text.

    Idempotent: a handler installed by an earlier call is replaced. Returns the new handler.
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(handler)
    handler = _Handler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # the HTTP client logs every request at INFO: the runtime counts requests in metrics instead
    for noisy in _NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return handler


_NOISY_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2")
