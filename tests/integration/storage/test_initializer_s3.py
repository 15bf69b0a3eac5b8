"""The storage initializer as a real process (``python -m mlops_platform.storage fetch s3://...``)
against a real MinIO (testing.objectstores: SigV4 credentials checked), what only S3 has: wrong
credentials refused, the endpoint and region on the command line with credentials from the
environment. What every store does alike (single files, directory prefixes, archives, checksums,
missing objects; for S3 with everything from a mounted-Secret directory) is in
``test_initializer_stores.py``.

No cluster is needed: these tests use none of the cluster fixtures.
"""

from __future__ import annotations

from pathlib import Path

from mlops_platform.testing import initializer, objectstores
from mlops_platform.testing.objectstores import S3Server


async def _fetch(uri: str, dest: Path, *args: str, tmp_path: Path, **kw: object) -> initializer.Run:
    return await initializer.fetch(uri, dest, *args, termination_log=tmp_path / "termination-log", **kw)  # type: ignore[arg-type]


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
