"""Safe unpacking: no member lands outside the directory, no link points out of it, no devices."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from mlops_platform.storage import archives, failure


def make_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz" if path.name.endswith(("gz", "tgz")) else "w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.mode = 0o644
    return info


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["m.tar.gz", "m.tgz", "m.tar"])
def test_tar_unpacks_files_directories_and_inner_links(tmp_path: Path, name: str) -> None:
    archive = make_tar(
        tmp_path / name,
        [
            (member("m/1", tarfile.DIRTYPE), None),
            (member("m/1/model.onnx"), b"weights"),
            (member("m/latest", tarfile.SYMTYPE, "1/model.onnx"), None),
        ],
    )
    archives.unpack(archive, tmp_path / "out")
    assert files(tmp_path / "out") == {"m/1/model.onnx": b"weights", "m/latest": b"weights"}


@pytest.mark.parametrize(
    ("info", "data", "words"),
    [
        (member("../evil"), b"x", "outside the destination"),
        (member("a/../../evil"), b"x", "outside the destination"),
        (member("link", tarfile.SYMTYPE, "/etc/passwd"), None, "absolute"),
        (member("link", tarfile.SYMTYPE, "../../etc/passwd"), None, "outside the destination"),
        (member("hard", tarfile.LNKTYPE, "../outside"), None, "outside the destination"),
        (member("dev", tarfile.CHRTYPE), None, "special file"),
        (member("fifo", tarfile.FIFOTYPE), None, "special file"),
    ],
)
def test_tar_refuses_unsafe_members(
    tmp_path: Path, info: tarfile.TarInfo, data: bytes | None, words: str
) -> None:
    archive = make_tar(tmp_path / "bad.tar.gz", [(member("ok.txt"), b"ok"), (info, data)])
    with pytest.raises(failure.DownloadFailed, match=rf"unsafe member in bad.tar.gz: .*{words}"):
        archives.unpack(archive, tmp_path / "sub" / "out")
    assert not (tmp_path / "evil").exists()
    assert not (tmp_path / "sub" / "evil").exists()


def test_tar_absolute_names_land_inside(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "abs.tar", [(member("/etc/evil"), b"x")])
    archives.unpack(archive, tmp_path / "out")  # the data filter strips the leading '/'
    assert files(tmp_path / "out") == {"etc/evil": b"x"}


def test_corrupt_archives_fail_with_their_name(tmp_path: Path) -> None:
    (tmp_path / "m.tgz").write_bytes(b"not gzip at all")
    with pytest.raises(failure.DownloadFailed, match=r"m\.tgz is not a valid tar archive"):
        archives.unpack(tmp_path / "m.tgz", tmp_path / "out")
    (tmp_path / "m.zip").write_bytes(b"not a zip")
    with pytest.raises(failure.DownloadFailed, match=r"m\.zip is not a valid zip archive"):
        archives.unpack(tmp_path / "m.zip", tmp_path / "out")


def make_zip(path: Path, members: list[tuple[str, bytes, int]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


def test_zip_unpacks(tmp_path: Path) -> None:
    archive = make_zip(
        tmp_path / "m.zip",
        [
            ("m/", b"", stat.S_IFDIR | 0o755),
            ("m/model.bst", b"b", stat.S_IFREG | 0o644),
            ("top.txt", b"t", 0),
        ],
    )
    archives.unpack(archive, tmp_path / "out")
    assert files(tmp_path / "out") == {"m/model.bst": b"b", "top.txt": b"t"}


@pytest.mark.parametrize(
    ("name", "mode", "words"),
    [
        ("../evil", stat.S_IFREG | 0o644, "leaves the directory"),
        ("a/../../evil", stat.S_IFREG | 0o644, "leaves the directory"),
        ("/etc/evil", stat.S_IFREG | 0o644, "absolute path"),
        ("C:/evil", stat.S_IFREG | 0o644, "absolute path"),
        ("a\\..\\..\\evil", stat.S_IFREG | 0o644, "absolute path"),
        ("link", stat.S_IFLNK | 0o777, "is a link"),
        ("dev", stat.S_IFCHR | 0o644, "not a file or directory"),
    ],
)
def test_zip_refuses_unsafe_members(tmp_path: Path, name: str, mode: int, words: str) -> None:
    archive = make_zip(tmp_path / "bad.zip", [("ok.txt", b"ok", 0), (name, b"/etc/passwd", mode)])
    with pytest.raises(failure.DownloadFailed, match=rf"unsafe member in bad.zip: .*{words}"):
        archives.unpack(archive, tmp_path / "sub" / "out")
    assert not (tmp_path / "evil").exists()
    assert not (tmp_path / "sub" / "out").exists() or files(tmp_path / "sub" / "out") == {}


def test_kind_by_name() -> None:
    assert [archives.kind(n) for n in ["a.tar.gz", "a.TGZ", "a.tar", "a.zip", "a.mar", "a.onnx"]] == [
        "tar",
        "tar",
        "tar",
        "zip",
        None,
        None,
    ]
