"""Safe unpacking of a downloaded archive (``.tar.gz``/``.tgz``/``.tar``/``.zip``) into a directory.

Nothing lands outside the directory: tar members go through :mod:`tarfile`'s ``data`` filter (no
absolute paths, no ``..`` out of the directory, no links pointing out of it, no device files or
FIFOs, no set-uid bits); zip members are checked here the same way (a zip symlink is refused, as
are names with ``..`` or a drive, and members that are neither files nor directories).
"""

from __future__ import annotations

import shutil
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from mlops_platform.storage import failure

#: name endings that unpack, and their kind
SUFFIXES = {".tar.gz": "tar", ".tgz": "tar", ".tar": "tar", ".zip": "zip"}


def kind(name: str) -> str | None:
    """``tar`` or ``zip`` for an archive's file name, else None (a ``.mar`` is a zip that stays whole)."""
    lower = name.lower()
    for suffix, found in SUFFIXES.items():
        if lower.endswith(suffix):
            return found
    return None


def unpack(archive: Path, dest: Path) -> None:
    """Unpack ``archive`` into the directory ``dest`` (created), or fail naming the member."""
    found = kind(archive.name)
    if found is None:
        raise failure.DownloadFailed(f"{archive.name} is not an archive (.tar.gz, .tgz, .tar, .zip)")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if found == "tar":
            _untar(archive, dest)
        else:
            _unzip(archive, dest)
    except failure.DownloadFailed:
        raise
    except OSError as e:
        raise failure.DownloadFailed(f"cannot unpack {archive.name}: {e.strerror or e}") from e


def _untar(archive: Path, dest: Path) -> None:
    try:
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(dest, filter="data")
    except tarfile.FilterError as e:
        raise failure.DownloadFailed(f"unsafe member in {archive.name}: {e}") from e
    except (tarfile.TarError, EOFError) as e:
        raise failure.DownloadFailed(f"{archive.name} is not a valid tar archive: {e}") from e


def _member_path(name: str, archive: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if "\\" in name or path.is_absolute() or (path.parts and ":" in path.parts[0]):
        raise failure.DownloadFailed(f"unsafe member in {archive}: {name!r} is an absolute path")
    if any(part == ".." for part in path.parts):
        raise failure.DownloadFailed(f"unsafe member in {archive}: {name!r} leaves the directory")
    return path


def _unzip(archive: Path, dest: Path) -> None:
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            for info in members:
                kind_bits = stat.S_IFMT(info.external_attr >> 16)  # 0: no Unix mode (a plain file)
                _member_path(info.filename, archive.name)
                if kind_bits == stat.S_IFLNK:
                    raise failure.DownloadFailed(
                        f"unsafe member in {archive.name}: {info.filename!r} is a link"
                    )
                if kind_bits not in (0, stat.S_IFREG, stat.S_IFDIR):
                    raise failure.DownloadFailed(
                        f"unsafe member in {archive.name}: {info.filename!r} is not a file or directory"
                    )
            needed = sum(info.file_size for info in members)
            free = shutil.disk_usage(dest).free
            if needed > free:
                raise failure.DownloadFailed(
                    f"not enough space to unpack {archive.name}: {needed} bytes needed, {free} free"
                )
            root = dest.resolve()
            for info in members:
                target = (dest / _member_path(info.filename, archive.name)).resolve()
                if target != root and root not in target.parents:
                    raise failure.DownloadFailed(
                        f"unsafe member in {archive.name}: {info.filename!r} leaves the directory"
                    )
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
    except zipfile.BadZipFile as e:
        raise failure.DownloadFailed(f"{archive.name} is not a valid zip archive: {e}") from e
