"""The storage initializer as a real process against each object store alike (``store``: MinIO for
``s3://``, reached through a mounted-Secret directory; fake-gcs-server for ``gs://``, through
``--endpoint``): a file uploaded in parts comes back whole and verified, a directory prefix is
copied recursively, an archive unpacks into the runtime's layout, a checksum mismatch and a missing
object fail in one line naming the URI and leave nothing. What only one store does is in
``test_initializer_s3.py`` / ``test_initializer_gcs.py``.

No cluster is needed: these tests use none of the cluster fixtures.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from mlops_platform.testing import initializer

if TYPE_CHECKING:
    from tests.integration.storage.conftest import Store


async def test_single_file_in_parts_with_checksum(store: Store, tmp_path: Path) -> None:
    """The object goes in parts (a multipart / resumable upload) and comes back whole and verified."""
    data = os.urandom(6 * 1024 * 1024 + 7)
    src = tmp_path / "model.onnx"
    src.write_bytes(data)
    await store.upload("resnet/1/model.onnx", src)
    uri = store.uri("resnet/1/model.onnx")
    dest = tmp_path / "models"
    run = await store.fetch(uri, dest, "--sha256", hashlib.sha256(data).hexdigest(), tmp_path=tmp_path)
    assert (run.code, run.failure_line) == (0, ""), run.stderr
    assert initializer.files(dest) == {"model.onnx": data}
    done = [d for d in run.logs() if d["msg"] == "downloaded"]
    assert [(d["uri"], d["bytes"], d["percent"]) for d in done] == [(uri, len(data), 100.0)]
    assert any(d["msg"] == "sha256 verified" for d in run.logs())


async def test_directory_prefix_is_copied_recursively(store: Store, tmp_path: Path) -> None:
    tree = {
        "config.pbtxt": b'name: "bert"\n',
        "1/model.pt": b"weights",
        "1/vocab/tokens.txt": b"a b c",
    }
    for rel, body in tree.items():
        await store.upload(f"bert/{rel}", body)
    await store.upload("bert-other/ignored.bin", b"not under bert/")
    for uri in (store.uri("bert/"), store.uri("bert")):  # with and without its '/'
        dest = tmp_path / f"models-{len(uri)}"
        run = await store.fetch(uri, dest, tmp_path=tmp_path)
        assert run.code == 0, run.stderr
        assert initializer.files(dest) == tree, uri


async def test_tar_gz_archive_is_unpacked_into_the_layout(store: Store, tmp_path: Path) -> None:
    archive = initializer.tar(
        {"config.pbtxt": b'name: "upstream"\nbackend: "onnxruntime"\n', "1/model.onnx": b"w"}
    )
    await store.upload("iris/model.tar.gz", archive)
    dest = tmp_path / "models"
    run = await store.fetch(
        store.uri("iris/model.tar.gz"),
        dest,
        "--layout=triton",
        "--name=iris",
        "--sha256",
        hashlib.sha256(archive).hexdigest(),
        tmp_path=tmp_path,
    )
    assert run.code == 0, run.stderr
    assert initializer.files(dest) == {
        "iris/1/model.onnx": b"w",
        "iris/config.pbtxt": b'name: "iris"\nbackend: "onnxruntime"\n',
    }


async def test_checksum_mismatch_fails_and_leaves_nothing(store: Store, tmp_path: Path) -> None:
    await store.upload("m/model.joblib", b"model bytes")
    uri = store.uri("m/model.joblib")
    dest = tmp_path / "models"
    run = await store.fetch(uri, dest, "--sha256", "0" * 64, tmp_path=tmp_path)
    got = hashlib.sha256(b"model bytes").hexdigest()
    line = f"model download failed: {uri}: sha256 mismatch: expected {'0' * 64}, got {got}"
    assert (run.code, run.failure_line) == (1, line)
    assert run.stderr.rstrip("\n").endswith(line)
    assert list(dest.iterdir()) == []


async def test_missing_object_names_the_uri(store: Store, tmp_path: Path) -> None:
    # (a missing bucket is not asked: fake-gcs-server's filesystem backend answers a listing of one
    # with 500, where GCS says 404)
    for uri in (store.uri("no/such/model.pt"), store.uri("no/such/dir/")):
        run = await store.fetch(uri, tmp_path / "models", tmp_path=tmp_path)
        assert run.code == 1, uri
        assert run.failure_line.startswith(f"model download failed: no object at {uri}"), run.failure_line
        assert run.termination.count("\n") == 1
