"""The initializer's one failure type, and how a store's error reads in the failure line."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from obstore import exceptions as obs_exceptions

PREFIX = "model download failed: "
#: Kubernetes keeps at most 4096 bytes of a termination message: a reason stays well below
MAX_REASON = 1500

_STATUS = re.compile(r"status code: (\d{3}(?: [A-Za-z][A-Za-z -]*[A-Za-z])?)")
_REQUEST = re.compile(r"Error performing (GET|HEAD|PUT|POST) (\S+)")
_XML_CODE = re.compile(r"<Code>([^<]{1,100})</Code>")
_XML_MESSAGE = re.compile(r"<Message>([^<]{1,300})</Message>")
_JSON_MESSAGE = re.compile(r'"message"\s*:\s*"([^"]{1,300})"')


#: obstore raises the builtin FileNotFoundError for a missing object (its NotFoundError is kept for
#: older releases)
NOT_FOUND: tuple[type[Exception], ...] = (obs_exceptions.NotFoundError, FileNotFoundError)
#: what a store operation raises
STORE_ERRORS: tuple[type[Exception], ...] = (obs_exceptions.BaseError, *NOT_FOUND)


class DownloadFailed(Exception):
    """The model cannot be delivered; ``reason`` is the failure line's text (one line)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = one_line(reason)


def one_line(text: str) -> str:
    """``text`` on one line (white space collapsed), at most :data:`MAX_REASON` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_REASON else flat[: MAX_REASON - 3] + "..."


def line(reason: str) -> str:
    """The failure line: ``model download failed: <reason>``."""
    return PREFIX + one_line(reason)


def http_status(exc: BaseException) -> str | None:
    """The HTTP status a store error carries (``403 Forbidden``), if any."""
    match = _STATUS.search(str(exc))
    return match.group(1) if match else None


def _detail(text: str) -> str | None:
    """The service's own words in an error body: S3's XML ``<Code>``/``<Message>``, GCS's JSON."""
    code, message = _XML_CODE.search(text), _XML_MESSAGE.search(text)
    if code:
        return f"{code.group(1)}: {message.group(1)}" if message else code.group(1)
    json_message = _JSON_MESSAGE.search(text)
    return json_message.group(1) if json_message else None


def has_detail(exc: BaseException) -> bool:
    """Whether a store error carries the service's own words (a GET's error body does, a HEAD's not)."""
    return _detail(str(exc).split("\n\nDebug source:", 1)[0]) is not None


def summary(exc: BaseException, uri: str | None = None) -> str:
    """A store error without obstore's debug dump: ``<status> (<the service's detail>)`` when the
    server answered (and which request it was, when it was not for ``uri``'s host: a credentials
    service, say), else the error's first paragraph."""
    text = str(exc).split("\n\nDebug source:", 1)[0]
    status = http_status(exc)
    if status:
        detail = _detail(text)
        said = f"{status} ({detail})" if detail else status
        request = _REQUEST.search(text)
        if request and uri is not None and _location(uri) not in request.group(2):
            said += f" from {request.group(1)} {request.group(2)}"
        return said
    return one_line(text) or type(exc).__name__


def _location(uri: str) -> str:
    """The bucket (s3, gs) or host (http) of ``uri``: a request naming it was for the object."""
    return urlsplit(uri).netloc


def describe(exc: BaseException, uri: str) -> str:
    """The failure reason for a store error while fetching ``uri``."""
    status = http_status(exc)
    if isinstance(exc, NOT_FOUND) or (status or "").startswith("404"):
        return f"no object at {uri}"
    if isinstance(exc, obs_exceptions.PermissionDeniedError) or (status or "").startswith("403"):
        return f"access to {uri} denied: {summary(exc, uri) if status else '403 Forbidden'}"
    if isinstance(exc, obs_exceptions.UnauthenticatedError) or (status or "").startswith("401"):
        return f"not authenticated for {uri}: {summary(exc, uri) if status else '401 Unauthorized'}"
    return f"{uri}: {summary(exc, uri)}"
