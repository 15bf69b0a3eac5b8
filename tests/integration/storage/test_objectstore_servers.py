"""The object-store test servers (mlops_platform.testing.objectstores) are real and behave like the
clouds where the storage initializer relies on it: what is uploaded reads back through obstore,
prefixes list, ranges read, missing objects are "not found", and MinIO checks SigV4 credentials."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import obstore
import pytest
from obstore.exceptions import NotFoundError, PermissionDeniedError
from obstore.store import GCSStore, S3Store

from mlops_platform.testing import objectstores, ports, serverprocess
from mlops_platform.testing.objectstores import GCSServer, S3Server

if TYPE_CHECKING:
    from tests.integration.storage.conftest import Store

BIG = 12 * 1024 * 1024 + 123  # > 2 multipart chunks, not a multiple of one
# obstore (0.12) raises the builtin FileNotFoundError for a missing object; older ones NotFoundError
NOT_FOUND = (FileNotFoundError, NotFoundError)


async def _read(store: S3Store | GCSStore, path: str) -> bytes:
    result = await obstore.get_async(store, path)
    return bytes(await result.bytes_async())


async def _listed(store: S3Store | GCSStore, prefix: str) -> dict[str, int]:
    return {meta["path"]: meta["size"] for meta in await obstore.list(store, prefix).collect_async()}


def _big_file(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "big.bin"
    data = os.urandom(BIG)
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


async def test_upload_then_read_back_list_and_range(store: Store) -> None:
    """Either server (MinIO, fake-gcs-server) alike."""
    await store.upload("models/bert/1/model.pt", b"weights-0123456789")
    await store.upload("models/bert/1/config.json", b"{}")
    await store.upload("models/other/model.pt", b"other")
    objects = store.server.store(store.bucket)

    assert await _read(objects, "models/bert/1/model.pt") == b"weights-0123456789"
    assert await _listed(objects, "models/bert/1") == {
        "models/bert/1/model.pt": 18,
        "models/bert/1/config.json": 2,
    }
    ranged = await obstore.get_range_async(objects, "models/bert/1/model.pt", start=8, end=12)
    assert bytes(ranged) == b"0123"


async def test_a_big_file_goes_in_parts_and_reads_back_whole(store: Store, tmp_path: Path) -> None:
    path, digest = _big_file(tmp_path)
    await store.upload("big/model.bin", path)
    objects = store.server.store(store.bucket)
    head = await obstore.head_async(objects, "big/model.bin")
    assert head["size"] == BIG
    if store.scheme == "s3":  # a multipart upload's ETag is "<md5 of the parts' md5s>-<number of parts>"
        assert (head["e_tag"] or "").strip('"').endswith("-3"), head["e_tag"]
    assert hashlib.sha256(await _read(objects, "big/model.bin")).hexdigest() == digest


# -- MinIO -----------------------------------------------------------------------------------------


async def test_s3_rejects_wrong_credentials(minio_server: S3Server, s3_bucket: str) -> None:
    await minio_server.upload(s3_bucket, "secret/model.pt", b"weights")
    wrong_secret = minio_server.store(s3_bucket, secret_key="not-the-secret-key")
    with pytest.raises(PermissionDeniedError) as info:
        await _read(wrong_secret, "secret/model.pt")
    assert "SignatureDoesNotMatch" in str(info.value)
    unknown_key = minio_server.store(s3_bucket, access_key="nobody", secret_key="not-the-secret-key")
    with pytest.raises(PermissionDeniedError) as info:
        await _read(unknown_key, "secret/model.pt")
    assert "InvalidAccessKeyId" in str(info.value)
    # the right credentials still read it: the failures were the credentials, not the object
    assert await _read(minio_server.store(s3_bucket), "secret/model.pt") == b"weights"


async def test_s3_missing_object_is_not_found(minio_server: S3Server, s3_bucket: str) -> None:
    with pytest.raises(NOT_FOUND) as info:
        await _read(minio_server.store(s3_bucket), "no/such/model.pt")
    assert "NoSuchKey" in str(info.value)
    with pytest.raises(NOT_FOUND) as info:
        await _read(minio_server.store("no-such-bucket"), "model.pt")
    assert "NoSuchBucket" in str(info.value)


# -- fake-gcs-server -------------------------------------------------------------------------------


async def test_gcs_missing_object_is_not_found(fake_gcs_server: GCSServer, gcs_bucket: str) -> None:
    with pytest.raises(NOT_FOUND) as info:
        await _read(fake_gcs_server.store(gcs_bucket), "no/such/model.pt")
    assert "404" in str(info.value)


async def test_gcs_explicit_base_url_without_a_key_reaches_the_emulator(
    fake_gcs_server: GCSServer, gcs_bucket: str
) -> None:
    """The other way to reach an emulator: ``base_url`` plus ``skip_signature`` (no credentials)."""
    await fake_gcs_server.upload(gcs_bucket, "a.txt", b"a")
    store = GCSStore(
        gcs_bucket,
        base_url=fake_gcs_server.endpoint,
        skip_signature=True,
        client_options={"allow_http": True},
        retry_config={"max_retries": 0},
    )
    assert await _read(store, "a.txt") == b"a"


# -- lifecycle -------------------------------------------------------------------------------------


async def test_servers_leave_no_process_or_data_behind(tmp_path: Path) -> None:
    async with objectstores.minio(tmp_path / "s3") as s3, objectstores.fake_gcs(tmp_path / "gcs") as gcs:
        await s3.create_bucket("lifecycle")
        await s3.upload("lifecycle", "k", b"v")
        await gcs.create_bucket("lifecycle")
        await gcs.upload("lifecycle", "k", b"v")
        assert s3.process.process.returncode is None and gcs.process.process.returncode is None
        assert any(s3.data_dir.iterdir()) and any(gcs.data_dir.iterdir())
    assert s3.process.process.returncode is not None
    assert gcs.process.process.returncode is not None
    assert list((tmp_path / "s3").iterdir()) == []
    assert list((tmp_path / "gcs").iterdir()) == []


async def test_a_port_taken_before_the_bind_is_retried_on_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ports.free_port
    given: list[int] = []
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]

        def port() -> int:
            given.append(taken if not given else real())
            return given[-1]

        monkeypatch.setattr(objectstores, "free_port", port)
        async with objectstores.fake_gcs(tmp_path) as gcs:
            await gcs.create_bucket("retried")
    assert len(given) == 2 and given[0] == taken  # the first launch exited: one more, on a new port
    assert gcs.endpoint == f"http://127.0.0.1:{given[1]}"


async def test_a_server_that_cannot_start_fails_with_its_log(tmp_path: Path) -> None:
    # MinIO refuses a root password shorter than 8 characters, on every attempt
    with pytest.raises(serverprocess.ServerExited, match=r"(?s)minio exited with \d+ while starting:.*"):
        async with objectstores.minio(tmp_path, secret_key="short"):
            pytest.fail("MinIO started with a 5-character root password")
    assert os.listdir(tmp_path) == []
