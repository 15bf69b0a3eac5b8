"""The client's bodies on the wire (:mod:`~mlops_platform.runtime.transport.client`): request bodies
encoded, answers decoded into plain dicts or :class:`~.rest.ApiError`. No I/O.

Contract:

- :func:`encode_body` is JSON (msgspec); a body sent as ``application/*+yaml`` (server-side apply)
  has every character a YAML parser refuses or folds written as a ``\\uXXXX`` escape
  (:func:`yaml_safe_json`): the same string, once parsed.
- :func:`decode_answer` returns a 2xx answer's JSON object (``{}`` when there is none), decoded with
  the given decoder (a :mod:`.shape`) if any; a non-2xx answer raises :class:`~.rest.ApiError` with
  the Status body's reason and message, else the API's name for the code (``TooManyRequests``, as
  client-go's, never the HTTP reason phrase) and the body's first 500 bytes.
- :func:`retry_after` is the wait a 429 (or a 5xx with ``Retry-After``) asks for, capped at
  :data:`MAX_RETRY_AFTER_SECONDS`; an :class:`~.rest.ApiError` of such an answer carries it as
  ``body["details"]["retryAfterSeconds"]`` even when the body is no Status.
- :func:`watch_error` is the :class:`~.rest.ApiError` of a watch stream's ``ERROR`` event.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from mlops_platform.runtime.transport import http as rhttp
from mlops_platform.runtime.transport import shape as rshape
from mlops_platform.runtime.transport.rest import ApiError

__all__ = [
    "MAX_RETRY_AFTER_SECONDS",
    "clean_params",
    "decode_answer",
    "decode_json",
    "encode_body",
    "retry_after",
    "watch_error",
    "yaml_safe_json",
]

JSON = dict[str, Any]
_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
MAX_RETRY_AFTER_SECONDS = 30.0
#: a watch event's line, or any body, as JSON
decode_json = _decoder.decode


def encode_body(body: Any, content_type: str) -> bytes | None:
    """``body`` as JSON (None: no body); YAML-safe when ``content_type`` is a YAML one."""
    content = _encoder.encode(body) if body is not None else None
    if content is not None and content_type.endswith("+yaml"):
        content = yaml_safe_json(content)
    return content


def watch_error(event: JSON) -> ApiError:
    """The error an ``ERROR`` watch event carries (its object is a Status)."""
    status = event.get("object") or {}
    return ApiError(
        int(status.get("code") or 500),
        str(status.get("reason") or "Error"),
        str(status.get("message") or ""),
        status,
    )


#: characters JSON carries raw that a YAML parser refuses or reads as something else, as UTF-8: DEL,
#: the C1 controls and U+FFFE/U+FFFF are not allowed raw ("control characters are not allowed"), and
#: NEL, U+2028 and U+2029 are YAML 1.1 line breaks, folded to a space inside a quoted scalar. JSON
#: itself escapes only the characters below U+0020.
_NOT_YAML_PRINTABLE = re.compile(rb"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]|\xef\xbf[\xbe\xbf]")


def yaml_safe_json(content: bytes) -> bytes:
    """``content`` (UTF-8 JSON) with every character of :data:`_NOT_YAML_PRINTABLE` written as a
    ``\\uXXXX`` escape: the API server parses a server-side apply body
    (``application/apply-patch+yaml``) as YAML, JSON being YAML, and answers 400 "control
    characters are not allowed" to a string holding one raw (a string a valid InferenceService
    carries into a child or its status may: the reliability suite's hostile input found it).
    Outside strings JSON is ASCII,
    so only string contents change, to the same string."""
    if content.isascii() and b"\x7f" not in content:  # nearly every body: two scans in C, no regex
        return content
    if not _NOT_YAML_PRINTABLE.search(content):
        return content
    return _NOT_YAML_PRINTABLE.sub(lambda m: b"\\u%04x" % ord(m.group().decode()), content)


def clean_params(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not params:
        return None
    return {k: v for k, v in params.items() if v is not None}


def retry_after(response: rhttp.Response) -> float | None:
    if response.status != 429 and not (response.status >= 500 and "Retry-After" in response.headers):
        return None
    try:
        seconds = float(response.headers.get("Retry-After", "1"))
    except ValueError:
        seconds = 1.0
    return max(0.0, min(seconds, MAX_RETRY_AFTER_SECONDS))


def decode_answer(response: rhttp.Response, decoder: msgspec.json.Decoder[Any] | None = None) -> JSON:
    body: Any = None
    if response.body:
        try:
            if decoder is None or response.status >= 300:
                body = _decoder.decode(response.body)
            else:
                body = rshape.decode(decoder, response.body)
        except msgspec.DecodeError:
            body = None
    if response.status >= 300:
        status = body if isinstance(body, dict) else {}
        wait = retry_after(response)
        if wait is not None and "Retry-After" in response.headers:
            # priority and fairness answers 429 with a plain-text body and the Retry-After header
            # only: carry the header where a Status says it, so that the caller that retries (the
            # informer, for a watch the client does not retry) waits what the server asked for
            details = status.setdefault("details", {})
            if isinstance(details, dict) and not details.get("retryAfterSeconds"):
                details["retryAfterSeconds"] = wait
        raise ApiError(
            response.status,
            str(status.get("reason") or _reason(response.status, response.reason)),
            str(status.get("message") or response.body[:500].decode(errors="replace")),
            status,
        )
    return body if isinstance(body, dict) else {}


#: the Status reason of an answer whose body is no Status (client-go's ``NewGenericServerResponse``)
_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Gone",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def _reason(code: int, phrase: str) -> str:
    """A reason in the API's form (``TooManyRequests``), never the HTTP reason phrase ("Too Many
    Requests"): callers put reasons where the API only takes ``[A-Za-z][A-Za-z0-9_,:]*`` (a condition's
    reason) and compare them with the API's. Other codes: the phrase in CamelCase ("BadGateway")."""
    if code in _REASONS:
        return _REASONS[code]
    words = "".join(w[:1].upper() + w[1:] for w in re.split(r"[^A-Za-z0-9]+", phrase))
    return words if words[:1].isalpha() else "Unknown"
