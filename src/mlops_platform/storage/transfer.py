"""One object to one file: streamed in bounded chunks, hashed on the way, resumed with a ranged
request after a broken connection, and renamed into place only when complete.

Memory stays bounded by :data:`CHUNK` (the stream's chunks are at least, and about, that size);
nothing reads a whole object. Two layers of retries: obstore's (each request: 5xx, connection
errors, timeouts, and a body that breaks off, which it re-requests from the offset reached), and
:func:`download`'s on top of that: when obstore gives up, the download goes on from the bytes
already written (``Range: bytes=N-``, with ``If-Match`` on the first response's ETag), or restarts
from zero when the server cannot serve a range or the object changed. The partial file is a hidden
``.<name>.part`` beside the target, so a failure never leaves a file that looks complete.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import obstore
from obstore import exceptions as obs_exceptions

from mlops_platform.runtime.queue import ratelimiter
from mlops_platform.storage import failure

if TYPE_CHECKING:
    from _hashlib import HASH

    from obstore import GetOptions
    from obstore.store import ObjectStore

log = logging.getLogger("mlops_platform.storage")

#: the stream's minimum chunk: the unit of memory use and of writes
CHUNK = 1 << 20
#: consecutive failed attempts (no byte written in between) before the download fails
ATTEMPTS = 5
#: the waits between attempts (the project's one exponential backoff): 1 s, 2 s, 4 s, ... 30 s
BACKOFF = ratelimiter.Exponential(1.0, 30.0, jitter=0.2)
#: progress lines at most this often (and one at the end)
PROGRESS_INTERVAL = 2.0


class Progress:
    """Throttled progress lines over all the files of one download (``bytes`` of ``total``)."""

    def __init__(
        self,
        uri: str,
        total: int | None,
        *,
        interval: float = PROGRESS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.uri, self.total, self.interval, self._clock = uri, total, interval, clock
        self.bytes = 0
        self.file = ""
        self._last: float | None = None
        self.started = clock()

    def advance(self, file: str, n: int) -> None:
        """``n`` more bytes of ``file`` were written; a line if the last one is old enough."""
        self.file = file
        self.bytes += n
        now = self._clock()
        if self._last is None:
            self._last = now
        elif now - self._last >= self.interval:
            self._last = now
            self.emit("downloading")

    def rewind(self, n: int) -> None:
        """``n`` bytes already counted are written again (a restart from zero)."""
        self.bytes -= n

    def emit(self, msg: str) -> None:
        fields: dict[str, object] = {"uri": self.uri, "file": self.file, "bytes": self.bytes}
        if self.total is not None:
            fields["total"] = self.total
            fields["percent"] = round(100.0 * self.bytes / self.total, 1) if self.total else 100.0
        log.info(msg, extra=fields)

    @property
    def elapsed(self) -> float:
        return self._clock() - self.started


@dataclasses.dataclass(frozen=True, slots=True)
class Fetched:
    """A downloaded object: where it is, its size and its SHA-256 (hex)."""

    path: Path
    size: int
    sha256: str


class _Restart(Exception):
    """Start the object again from byte 0 (no range support, or the object changed)."""


class _Incomplete(Exception):
    """The body ended before the object's size: go on from there."""


def _retryable(exc: BaseException) -> bool:
    """A transient store error: no answer, a broken connection, a timeout, 5xx, 408 or 429."""
    permanent = (
        *failure.NOT_FOUND,
        obs_exceptions.PermissionDeniedError,
        obs_exceptions.UnauthenticatedError,
        obs_exceptions.InvalidPathError,
        obs_exceptions.UnknownConfigurationKeyError,
    )
    if isinstance(exc, permanent):
        return False
    status = failure.http_status(exc)
    return status is None or not status.startswith("4") or status[:3] in ("408", "429")


def _range_unsupported(exc: BaseException) -> bool:
    return "Range request not supported" in str(exc)


def _write(f: BinaryIO, chunk: bytes, target: Path, done: int, total: int | None) -> None:
    try:
        f.write(chunk)
    except OSError as e:
        of = f" of {total}" if total is not None else ""
        raise failure.DownloadFailed(
            f"cannot write {target} ({done}{of} bytes written): {e.strerror or e}"
        ) from e


def check_space(directory: Path, needed: int, what: str) -> None:
    """Fail early when ``directory``'s file system has less than ``needed`` bytes free."""
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise failure.DownloadFailed(
            f"not enough space in {directory} for {what}: {needed} bytes needed, {free} free"
        )


def download(
    store: ObjectStore,
    key: str,
    target: Path,
    *,
    uri: str,
    progress: Progress,
    expected_size: int | None = None,
    attempts: int = ATTEMPTS,
    backoff: ratelimiter.Exponential = BACKOFF,
    sleep: Callable[[float], None] = time.sleep,
) -> Fetched:
    """Fetch ``key`` of ``store`` (the object of ``uri``) into ``target`` (created or replaced)."""
    part = target.with_name(f".{target.name}.part")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(part, "wb") as f:
            state = _Partial(f, total=expected_size)
            _fetch_with_retries(
                store,
                key,
                target,
                state,
                uri=uri,
                progress=progress,
                attempts=attempts,
                backoff=backoff,
                sleep=sleep,
            )
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    if state.total is not None and state.written != state.total:
        part.unlink(missing_ok=True)
        raise failure.DownloadFailed(f"{uri}: got {state.written} bytes, the object has {state.total}")
    os.replace(part, target)
    return Fetched(target, state.written, state.digest.hexdigest())


@dataclasses.dataclass(slots=True)
class _Partial:
    """The part file being written and what is known of the object so far."""

    f: BinaryIO
    digest: HASH = dataclasses.field(default_factory=hashlib.sha256)
    #: bytes written to the part file (and hashed)
    written: int = 0
    #: the object's size (the expected one until the first response says)
    total: int | None = None
    #: the first response's ETag: a ranged request asks for that object only
    etag: str | None = None

    def restart(self, progress: Progress) -> None:
        """Empty the part file: the next request starts from byte 0."""
        progress.rewind(self.written)
        self.f.seek(0)
        self.f.truncate()
        self.digest, self.written, self.etag = hashlib.sha256(), 0, None


def _fetch_with_retries(
    store: ObjectStore,
    key: str,
    target: Path,
    state: _Partial,
    *,
    uri: str,
    progress: Progress,
    attempts: int,
    backoff: ratelimiter.Exponential,
    sleep: Callable[[float], None],
) -> None:
    """Request the rest of the object until it is all written; after a failed attempt, wait and go
    on from the bytes written, or from zero (:class:`_Restart`, a changed object, no range support).
    More than ``attempts`` failures in a row without a byte written: :class:`failure.DownloadFailed`."""
    failures = 0
    while True:
        before = state.written
        try:
            _get_into(store, key, target, state, uri=uri, progress=progress)
            return
        except failure.DownloadFailed:
            raise
        except (_Restart, obs_exceptions.PreconditionError) as e:
            cause: BaseException = e
            restart = True
        except _Incomplete as e:
            cause, restart = e, False
        except failure.STORE_ERRORS as e:
            if not _retryable(e):
                raise failure.DownloadFailed(failure.describe(e, uri)) from e
            cause, restart = e, _range_unsupported(e)
        failures = 1 if state.written > before else failures + 1
        if failures > attempts:
            raise failure.DownloadFailed(
                f"{uri}: gave up after {failures} failed attempts ({state.written} bytes written): "
                f"{failure.summary(cause)}"
            ) from cause
        if restart and state.written:
            state.restart(progress)
        delay = backoff.delay(failures - 1)
        log.warning(
            "download interrupted, retrying",
            extra={
                "uri": uri,
                "file": target.name,
                "bytes": state.written,
                "cause": failure.summary(cause),
                "retry_in": round(delay, 2),
                "from_start": restart,
            },
        )
        sleep(delay)


def _get_into(
    store: ObjectStore, key: str, target: Path, state: _Partial, *, uri: str, progress: Progress
) -> None:
    """One GET of the object from the bytes written so far (``Range``, ``If-Match`` on the ETag),
    its body appended to the part file and hashed. The first response tells the size and ETag (and
    the space is checked); a response from elsewhere is a :class:`_Restart`, a body that ends before
    the size an :class:`_Incomplete`."""
    options: GetOptions = {}
    if state.written:
        options["range"] = {"offset": state.written}
        if state.etag:
            options["if_match"] = state.etag
    result = obstore.get(store, key, options=options or None)
    if state.written == 0:
        meta = result.meta
        state.total, state.etag = meta["size"], meta.get("e_tag")
        if state.total:
            check_space(target.parent, state.total, uri)
    elif result.range[0] != state.written:
        raise _Restart(f"asked for bytes {state.written}-, got {result.range[0]}-")
    for chunk in result.stream(min_chunk_size=CHUNK):
        _write(state.f, chunk, target, state.written, state.total)
        state.digest.update(chunk)
        state.written += len(chunk)
        progress.advance(target.name, len(chunk))
    if state.total is not None and state.written < state.total:
        raise _Incomplete(f"the body ended at byte {state.written} of {state.total}")
