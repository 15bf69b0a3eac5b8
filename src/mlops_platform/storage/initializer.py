"""The initializer's steps: parse, list, download, verify, unpack, lay out, install into DEST.

Everything is written inside DEST (the pod's root file system is read-only): a hidden staging
directory ``DEST/.mlops-staging`` holds the download and the laid-out result, which is then renamed
into DEST entry by entry and the staging directory removed. A staging directory left by an earlier,
interrupted run (an emptyDir survives container restarts) is removed first.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shutil
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import obstore

from mlops_platform.api import modeluri
from mlops_platform.storage import archives, failure, layouts, stores, transfer

if TYPE_CHECKING:
    from obstore.store import ObjectStore

log = logging.getLogger("mlops_platform.storage")

STAGING = ".mlops-staging"
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """What ``fetch`` was asked (the command line, checked)."""

    uri: str
    dest: Path
    layout: str = "none"
    name: str = "model"
    model_format: str | None = None
    sha256: str | None = None
    credentials: Path | None = None
    endpoint: str | None = None
    region: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """What was delivered: the files' count and bytes, the seconds it took."""

    files: int
    bytes: int
    seconds: float


@dataclasses.dataclass(frozen=True, slots=True)
class _Object:
    key: str  # in the store
    relative: PurePosixPath  # under the download directory
    size: int | None


def check_sha256(value: str | None) -> str | None:
    """The expected digest in lower case, or a failure when it is not 64 hex digits."""
    if value is None:
        return None
    if not _SHA256.match(value):
        raise failure.DownloadFailed(f"--sha256 {value!r} is not a SHA-256 (64 hex digits)")
    return value.lower()


def _safe_relative(rel: str, uri: str) -> PurePosixPath:
    path = PurePosixPath(rel)
    if not rel or path.is_absolute() or any(p in ("", ".", "..") for p in rel.split("/")):
        raise failure.DownloadFailed(f"{uri}: object name {rel!r} cannot be a file name under DEST")
    return path


def _file_name(parsed: modeluri.ModelURI, uri: str) -> str:
    if parsed.scheme in ("http", "https"):
        name = unquote(PurePosixPath(urlsplit(uri).path).name)
    else:
        name = PurePosixPath(parsed.path).name
    if not name or "/" in name or name in (".", ".."):
        name = "model"
    return name


def _objects(store: ObjectStore, parsed: modeluri.ModelURI, uri: str) -> tuple[list[_Object], bool]:
    """The objects to fetch and whether the URI names one object (not a prefix)."""
    if parsed.scheme in ("http", "https"):
        return [_Object("", PurePosixPath(_file_name(parsed, uri)), None)], True
    if not parsed.is_prefix:
        try:
            meta = obstore.head(store, parsed.path)
        except failure.NOT_FOUND:
            pass  # maybe a prefix without its '/'
        except failure.STORE_ERRORS as e:
            raise failure.DownloadFailed(failure.describe(_explained(store, parsed.path, e), uri)) from e
        else:
            return [_Object(parsed.path, PurePosixPath(_file_name(parsed, uri)), meta["size"])], True
    prefix = parsed.path.rstrip("/")
    found: list[_Object] = []
    try:
        for batch in obstore.list(store, prefix=prefix or None, chunk_size=1000):
            for meta in batch:
                key = meta["path"]
                rel = key[len(prefix) :].lstrip("/") if prefix else key
                if not rel or key.endswith("/"):
                    continue  # a "directory" marker
                found.append(_Object(key, _safe_relative(rel, uri), meta["size"]))
    except failure.STORE_ERRORS as e:
        raise failure.DownloadFailed(failure.describe(e, uri)) from e
    if not found:
        raise failure.DownloadFailed(f"no object at {uri}")
    return found, False


def _explained(store: ObjectStore, path: str, error: Exception) -> Exception:
    """A HEAD's error has no body, so no reason (S3's ``SignatureDoesNotMatch``, a wrong region's
    ``AuthorizationHeaderMalformed``): the error of a one-byte GET of the same object says it."""
    if failure.has_detail(error):
        return error
    try:
        obstore.get(store, path, options={"range": (0, 1)}).bytes()
    except failure.STORE_ERRORS as e:
        return e if failure.has_detail(e) else error
    return error


def _install(out: Path, dest: Path) -> None:
    """Move the laid-out entries into DEST, replacing entries of the same name."""
    for entry in sorted(out.iterdir()):
        target = dest / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        entry.rename(target)


def fetch(request: Request) -> Result:
    """Deliver ``request.uri`` into ``request.dest``; :class:`failure.DownloadFailed` says why not."""
    uri = request.uri
    try:
        parsed = modeluri.parse(uri)
    except modeluri.ModelURIError as e:
        raise failure.DownloadFailed(f"bad model URI: {e}") from e
    if not parsed.remote:
        raise failure.DownloadFailed(
            f"{uri}: {parsed.scheme}:// is not fetched (pvc:// is mounted, file:// is in the image)"
        )
    if request.layout not in layouts.LAYOUTS:
        raise failure.DownloadFailed(f"unknown layout {request.layout!r} ({', '.join(layouts.LAYOUTS)})")
    expected = check_sha256(request.sha256)
    settings = stores.Settings(
        credentials=stores.read_credentials(request.credentials),
        endpoint=request.endpoint,
        region=request.region,
    )
    dest = request.dest
    staging = dest / STAGING
    try:
        dest.mkdir(parents=True, exist_ok=True)
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir()
    except OSError as e:
        raise failure.DownloadFailed(f"cannot create {staging}: {e.strerror or e}") from e
    try:
        result = _fetch_into(request, parsed, settings, staging, expected)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def _fetch_into(
    request: Request,
    parsed: modeluri.ModelURI,
    settings: stores.Settings,
    staging: Path,
    expected: str | None,
) -> Result:
    """The steps in ``staging``: list, download, verify and unpack one object, lay out, install."""
    uri = request.uri
    store = stores.build(uri, parsed, settings)
    objects, single = _objects(store, parsed, uri)
    progress = transfer.Progress(uri, _started(request, objects, single, expected, staging))
    downloaded = staging / "download"
    fetched = _download_all(store, objects, single, uri, downloaded, progress)
    size = sum(f.size for f in fetched)
    progress.total = size
    progress.emit("downloaded")
    src = downloaded
    if single:
        (one,) = fetched
        _verify(one, expected, uri)
        src = _unpacked(one, staging, uri) or src
    _lay_out(request, src, staging / "out")
    return _delivered(request, size, progress.elapsed)


def _started(
    request: Request, objects: list[_Object], single: bool, expected: str | None, staging: Path
) -> int | None:
    """Check the listing against the request (``--sha256`` verifies one object; the space for all
    of them) and log the start; the total bytes (None: a size is unknown)."""
    uri = request.uri
    if expected is not None and not single:
        raise failure.DownloadFailed(
            f"--sha256 verifies one object, but {uri} is a directory of {len(objects)} objects"
        )
    sizes = [o.size for o in objects]
    total = None if None in sizes else sum(s for s in sizes if s is not None)
    if total:
        transfer.check_space(staging, total, uri)
    log.info(
        "model download started",
        extra={"uri": uri, "objects": len(objects), "total": total, "layout": request.layout},
    )
    return total


def _download_all(
    store: ObjectStore,
    objects: list[_Object],
    single: bool,
    uri: str,
    downloaded: Path,
    progress: transfer.Progress,
) -> list[transfer.Fetched]:
    """Each object to its file under ``downloaded``, one after the other."""
    fetched: list[transfer.Fetched] = []
    for obj in objects:
        object_uri = uri if single else f"{uri.rstrip('/')}/{obj.relative.as_posix()}"
        fetched.append(
            transfer.download(
                store,
                obj.key,
                downloaded / obj.relative,
                uri=object_uri,
                progress=progress,
                expected_size=obj.size,
            )
        )
    return fetched


def _verify(one: transfer.Fetched, expected: str | None, uri: str) -> None:
    """The one object's SHA-256 against ``--sha256``, when given."""
    if expected is not None and one.sha256 != expected:
        raise failure.DownloadFailed(f"{uri}: sha256 mismatch: expected {expected}, got {one.sha256}")
    if expected is not None:
        log.info("sha256 verified", extra={"uri": uri, "sha256": one.sha256})


def _unpacked(one: transfer.Fetched, staging: Path, uri: str) -> Path | None:
    """The directory the one object, an archive, is unpacked into (the archive removed); None when
    it is no archive."""
    if archives.kind(one.path.name) is None:
        return None
    src = staging / "unpacked"
    archives.unpack(one.path, src)
    one.path.unlink()
    log.info("archive unpacked", extra={"uri": uri, "file": one.path.name})
    return src


def _lay_out(request: Request, src: Path, out: Path) -> None:
    """Arrange ``src`` in ``out`` as the layout says, then move it into DEST."""
    out.mkdir()
    try:
        layouts.arrange(request.layout, src, out, request.name, request.model_format)
        _install(out, request.dest)
    except OSError as e:
        raise failure.DownloadFailed(f"cannot lay out the model in {request.dest}: {e}") from e


def _delivered(request: Request, size: int, seconds: float) -> Result:
    """Count the files delivered into DEST and log the delivery."""
    uri = request.uri
    files = sum(1 for p in request.dest.rglob("*") if p.is_file() and STAGING not in p.parts)
    log.info(
        "model delivered",
        extra={
            "uri": uri,
            "dest": str(request.dest),
            "layout": request.layout,
            "files": files,
            "bytes": size,
            "seconds": round(seconds, 3),
            "mib_per_second": round(size / (1 << 20) / seconds, 1) if seconds > 0 else None,
        },
    )
    return Result(files=files, bytes=size, seconds=seconds)
