"""One object to one file: resumed from the bytes written, restarted when a range cannot be served,
permanent errors not retried, progress throttled, and a partial file never left looking complete."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import obstore
import pytest
from obstore import exceptions as obs_exceptions

from mlops_platform.runtime.observability import logs
from mlops_platform.runtime.queue import ratelimiter
from mlops_platform.storage import failure, transfer

DATA = bytes(range(256)) * 40  # 10,240 bytes
URI = "s3://models/iris/model.bin"


@dataclasses.dataclass
class Attempt:
    """One GET as the fake store answers it: serve from ``start`` (None: what was asked), break
    off after ``break_after`` bytes, or raise ``error`` right away."""

    start: int | None = None
    break_after: int | None = None
    error: BaseException | None = None


class FakeStore:
    def __init__(self, *attempts: Attempt, etag: str = '"v1"') -> None:
        self.attempts = list(attempts)
        self.etag = etag
        self.asked: list[dict[str, Any] | None] = []

    def get(self, store: object, key: str, *, options: dict[str, Any] | None = None) -> FakeResult:
        assert store is self and key == "iris/model.bin"
        self.asked.append(options)
        attempt = self.attempts.pop(0) if self.attempts else Attempt()
        if attempt.error is not None:
            raise attempt.error
        asked = (options or {}).get("range", {}).get("offset", 0)
        start = asked if attempt.start is None else attempt.start
        return FakeResult(self, start, attempt.break_after)


class FakeResult:
    def __init__(self, store: FakeStore, start: int, break_after: int | None) -> None:
        self.meta = {"path": "iris/model.bin", "size": len(DATA), "e_tag": store.etag}
        self.range = (start, len(DATA))
        self._start, self._break = start, break_after

    def stream(self, min_chunk_size: int) -> Iterator[bytes]:
        assert min_chunk_size == transfer.CHUNK
        sent = 0
        for offset in range(self._start, len(DATA), 1000):
            if self._break is not None and sent >= self._break:
                raise obs_exceptions.GenericError("Generic HTTP error: error decoding response body")
            chunk = DATA[offset : offset + 1000]
            sent += len(chunk)
            yield chunk


@pytest.fixture
def sleeps() -> list[float]:
    return []


def run(
    monkeypatch: pytest.MonkeyPatch, store: FakeStore, target: Path, sleeps: list[float], **kw: Any
) -> transfer.Fetched:
    monkeypatch.setattr(obstore, "get", store.get)
    return transfer.download(
        store,  # type: ignore[arg-type]
        "iris/model.bin",
        target,
        uri=URI,
        progress=transfer.Progress(URI, len(DATA)),
        backoff=ratelimiter.Exponential(1.0, 30.0),
        sleep=sleeps.append,
        **kw,
    )


def test_a_broken_connection_resumes_from_the_bytes_written(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sleeps: list[float]
) -> None:
    store = FakeStore(Attempt(break_after=3000), Attempt(break_after=4000))
    fetched = run(monkeypatch, store, tmp_path / "model.bin", sleeps)
    assert (tmp_path / "model.bin").read_bytes() == DATA
    assert fetched.sha256 == hashlib.sha256(DATA).hexdigest() and fetched.size == len(DATA)
    assert store.asked == [
        None,
        {"range": {"offset": 3000}, "if_match": '"v1"'},
        {"range": {"offset": 7000}, "if_match": '"v1"'},
    ]
    assert sleeps == [1.0, 1.0]  # progress in between: the backoff starts again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]


def test_a_server_without_ranges_restarts_from_zero(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sleeps: list[float]
) -> None:
    no_range = obs_exceptions.GenericError("Generic HTTP error: Range request not supported by model.bin")
    store = FakeStore(Attempt(break_after=5000), Attempt(error=no_range))
    fetched = run(monkeypatch, store, tmp_path / "model.bin", sleeps)
    assert (tmp_path / "model.bin").read_bytes() == DATA
    assert fetched.sha256 == hashlib.sha256(DATA).hexdigest()
    assert store.asked[-1] is None  # the last request is a whole GET again


def test_a_changed_object_restarts_from_zero(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sleeps: list[float]
) -> None:
    changed = obs_exceptions.PreconditionError("Request precondition failure: If-Match")
    store = FakeStore(Attempt(break_after=2000), Attempt(error=changed))
    assert run(monkeypatch, store, tmp_path / "model.bin", sleeps).size == len(DATA)
    assert (tmp_path / "model.bin").read_bytes() == DATA


def test_a_server_answering_the_wrong_range_restarts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sleeps: list[float]
) -> None:
    store = FakeStore(Attempt(break_after=2000), Attempt(start=0))
    assert run(monkeypatch, store, tmp_path / "model.bin", sleeps).sha256 == hashlib.sha256(DATA).hexdigest()


def test_gives_up_after_consecutive_failures_without_progress(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sleeps: list[float]
) -> None:
    down = obs_exceptions.GenericError("Generic HTTP error: error sending request: connection refused")
    store = FakeStore(*[Attempt(error=down)] * 10)
    with pytest.raises(failure.DownloadFailed, match=rf"{URI}: gave up after 4 failed attempts .*refused"):
        run(monkeypatch, store, tmp_path / "model.bin", sleeps, attempts=3)
    assert sleeps == [1.0, 2.0, 4.0]
    assert list(tmp_path.iterdir()) == []  # no partial file left


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            obs_exceptions.PermissionDeniedError(
                "Error performing GET http://s3/models/iris/model.bin in 2ms - Server returned non-2xx "
                "status code: 403 Forbidden: <Error><Code>AccessDenied</Code><Message>Access Denied"
                "</Message></Error>"
            ),
            f"access to {URI} denied: 403 Forbidden (AccessDenied: Access Denied)",
        ),
        (FileNotFoundError("Object at location iris/model.bin not found"), f"no object at {URI}"),
        (
            obs_exceptions.GenericError("Server returned non-2xx status code: 400 Bad Request: nope"),
            f"{URI}: 400 Bad Request",
        ),
    ],
)
def test_permanent_errors_are_not_retried(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sleeps: list[float], error: BaseException, reason: str
) -> None:
    store = FakeStore(Attempt(error=error))
    with pytest.raises(failure.DownloadFailed) as caught:
        run(monkeypatch, store, tmp_path / "model.bin", sleeps)
    assert caught.value.reason == reason
    assert sleeps == []


def test_write_errors_name_the_file_and_the_cause(tmp_path: Path) -> None:
    class Full(io.BytesIO):
        def write(self, b: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(
        failure.DownloadFailed, match=r"cannot write .*m.bin \(10 of 99 bytes written\): No space"
    ):
        transfer._write(Full(), b"x", tmp_path / "m.bin", 10, 99)


def test_not_enough_space_fails_before_downloading(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(transfer.shutil, "disk_usage", lambda _: type("U", (), {"free": 100})())
    with pytest.raises(failure.DownloadFailed, match=r"not enough space .* 1000 bytes needed, 100 free"):
        transfer.check_space(tmp_path, 1000, URI)


def test_progress_lines_are_throttled_and_carry_the_stable_keys() -> None:
    buf = io.StringIO()
    root = logging.getLogger()
    saved = root.level
    handler = logs.setup_logging("info", stream=buf)
    try:
        now = [0.0]
        progress = transfer.Progress(URI, 400, interval=2.0, clock=lambda: now[0])
        for t in (0.0, 0.5, 1.9, 2.0, 2.1, 4.5):
            now[0] = t
            progress.advance("model.bin", 50)
        progress.emit("downloaded")
    finally:
        root.removeHandler(handler)
        root.setLevel(saved)
    docs = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [(d["msg"], d["bytes"], d["percent"]) for d in docs] == [
        ("downloading", 200, 50.0),
        ("downloading", 300, 75.0),
        ("downloaded", 300, 75.0),
    ]
    assert list(docs[0]) == ["ts", "level", "logger", "msg", "uri", "file", "bytes", "total", "percent"]
