"""The storage initializer as a real process (``python -m mlops_platform.storage fetch s3://...``)
against a real MinIO (testing.objectstores: SigV4 credentials checked): single files, directory
prefixes, archives, checksums, wrong credentials, missing objects, endpoint and region from the
command line or the Secret, credentials from a mounted-Secret directory or the environment.

No cluster is needed: these tests use none of the cluster fixtures.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mlops_platform.testing import initializer, objectstores
from mlops_platform.testing.objectstores import S3Server


def _creds(server: S3Server, tmp_path: Path, **override: str) -> Path:
    values = server.credentials_files() | override
    return initializer.credentials_dir(tmp_path / "secret", values)


async def _fetch(uri: str, dest: Path, *args: str, tmp_path: Path, **kw: object) -> initializer.Run:
    return await initializer.fetch(uri, dest, *args, termination_log=tmp_path / "termination-log", **kw)  # type: ignore[arg-type]


async def test_single_file_with_checksum_and_credentials_directory(
    minio_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """Endpoint, region and keys all from the mounted Secret (AWS_ENDPOINT_URL, AWS_REGION, keys);
    the object goes in parts (multipart upload) and comes back whole and verified."""
    data = os.urandom(7 * 1024 * 1024 + 5)
    src = tmp_path / "model.onnx"
    src.write_bytes(data)
    await minio_server.upload(s3_bucket, "resnet/1/model.onnx", src)
    uri = f"s3://{s3_bucket}/resnet/1/model.onnx"
    dest = tmp_path / "models"
    run = await _fetch(
        uri,
        dest,
        "--credentials",
        str(_creds(minio_server, tmp_path)),
        "--sha256",
        hashlib.sha256(data).hexdigest(),
        tmp_path=tmp_path,
    )
    assert (run.code, run.failure_line) == (0, ""), run.stderr
    assert initializer.files(dest) == {"model.onnx": data}
    done = [d for d in run.logs() if d["msg"] == "downloaded"]
    assert [(d["uri"], d["bytes"], d["percent"]) for d in done] == [(uri, len(data), 100.0)]
    assert any(d["msg"] == "sha256 verified" for d in run.logs())


async def test_directory_prefix_is_copied_recursively(
    minio_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    tree = {
        "config.pbtxt": b'name: "bert"\n',
        "1/model.pt": b"weights",
        "1/vocab/tokens.txt": b"a b c",
    }
    for rel, body in tree.items():
        await minio_server.upload(s3_bucket, f"bert/{rel}", body)
    await minio_server.upload(s3_bucket, "bert-other/ignored.bin", b"not under bert/")
    creds = str(_creds(minio_server, tmp_path))
    for uri in (f"s3://{s3_bucket}/bert/", f"s3://{s3_bucket}/bert"):  # with and without its '/'
        dest = tmp_path / f"models-{len(uri)}"
        run = await _fetch(uri, dest, "--credentials", creds, tmp_path=tmp_path)
        assert run.code == 0, run.stderr
        assert initializer.files(dest) == tree, uri


async def test_tar_gz_archive_is_unpacked_into_the_layout(
    minio_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    archive = initializer.tar(
        {"config.pbtxt": b'name: "upstream"\nbackend: "onnxruntime"\n', "1/model.onnx": b"w"}
    )
    await minio_server.upload(s3_bucket, "iris/model.tar.gz", archive)
    dest = tmp_path / "models"
    run = await _fetch(
        f"s3://{s3_bucket}/iris/model.tar.gz",
        dest,
        "--credentials",
        str(_creds(minio_server, tmp_path)),
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


async def test_checksum_mismatch_fails_and_leaves_nothing(
    minio_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    await minio_server.upload(s3_bucket, "m/model.joblib", b"model bytes")
    uri = f"s3://{s3_bucket}/m/model.joblib"
    dest = tmp_path / "models"
    run = await _fetch(
        uri,
        dest,
        "--credentials",
        str(_creds(minio_server, tmp_path)),
        "--sha256",
        "0" * 64,
        tmp_path=tmp_path,
    )
    got = hashlib.sha256(b"model bytes").hexdigest()
    line = f"model download failed: {uri}: sha256 mismatch: expected {'0' * 64}, got {got}"
    assert (run.code, run.failure_line) == (1, line)
    assert run.stderr.rstrip("\n").endswith(line)
    assert list(dest.iterdir()) == []


async def test_wrong_credentials_are_refused(minio_server: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    await minio_server.upload(s3_bucket, "secret/model.pt", b"weights")
    uri = f"s3://{s3_bucket}/secret/model.pt"
    for i, override in enumerate(
        [
            {"AWS_SECRET_ACCESS_KEY": "not-the-secret-key"},
            {"AWS_ACCESS_KEY_ID": "nobody", "AWS_SECRET_ACCESS_KEY": "not-the-secret-key"},
        ]
    ):
        creds = initializer.credentials_dir(
            tmp_path / f"wrong-{i}", minio_server.credentials_files() | override
        )
        dest = tmp_path / f"models-{i}"
        run = await _fetch(uri, dest, "--credentials", str(creds), tmp_path=tmp_path)
        assert run.code != 0
        line = run.failure_line
        assert line.startswith(f"model download failed: access to {uri} denied: 403 Forbidden"), line
        # S3's own code, from the body of a one-byte GET (the HEAD's answer has none)
        assert ("SignatureDoesNotMatch" if i == 0 else "InvalidAccessKeyId") in line, line
        assert "\n" not in line and "not-the-secret-key" not in run.stderr + line  # no secret leaks
        assert not dest.exists() or initializer.files(dest) == {}


async def test_missing_object_names_the_uri(minio_server: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    creds = str(_creds(minio_server, tmp_path))
    for uri in (f"s3://{s3_bucket}/no/such/model.pt", f"s3://{s3_bucket}/no/such/dir/"):
        run = await _fetch(uri, tmp_path / "models", "--credentials", creds, tmp_path=tmp_path)
        assert run.code == 1
        assert run.failure_line.startswith(f"model download failed: no object at {uri}"), run.failure_line
        assert run.termination.count("\n") == 1


async def test_endpoint_and_region_on_the_command_line_credentials_from_the_environment(
    tmp_path: Path,
) -> None:
    """A MinIO in another region: requests signed for it succeed; signed for us-east-1 (the default)
    MinIO refuses them."""
    region = "eu-north-1"
    async with objectstores.minio(tmp_path / "eu", region=region) as eu:
        await eu.create_bucket("models")
        await eu.upload("models", "m/model.bin", b"nordic weights")
        env = {"AWS_ACCESS_KEY_ID": eu.access_key, "AWS_SECRET_ACCESS_KEY": eu.secret_key}
        uri = "s3://models/m/model.bin"
        ok = await _fetch(
            uri,
            tmp_path / "ok",
            "--endpoint",
            eu.endpoint,
            "--region",
            region,
            tmp_path=tmp_path,
            env=env,
        )
        assert ok.code == 0, ok.stderr
        assert initializer.files(tmp_path / "ok") == {"model.bin": b"nordic weights"}

        wrong = await _fetch(uri, tmp_path / "wrong", "--endpoint", eu.endpoint, tmp_path=tmp_path, env=env)
        assert wrong.code == 1
        # MinIO refuses a signature scoped to another region with 400 and says which region it wants
        line = wrong.failure_line
        assert line.startswith(f"model download failed: {uri}: 400 Bad Request ("), line
        assert "AuthorizationHeaderMalformed" in line and region in line, line
        assert not (tmp_path / "wrong").exists() or initializer.files(tmp_path / "wrong") == {}
