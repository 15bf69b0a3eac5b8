"""The storage initializer as a real process (``python -m mlops_platform.storage fetch gs://...``)
against a real GCS emulator (fake-gcs-server, testing.objectstores), what only GCS has: a
service-account key from a mounted-Secret directory (the emulator reached through ``--endpoint`` or
the key's own endpoint), a malformed key. What every store does alike (single files, directory
prefixes, archives, checksums, missing objects; for GCS through ``--endpoint`` with no key) is in
``test_initializer_stores.py``.

fake-gcs-server checks no credentials, so a key the service refuses cannot be tested here (S3's
is, against MinIO); keys the initializer cannot use can.

No cluster is needed: these tests use none of the cluster fixtures.
"""

from __future__ import annotations

import json
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from mlops_platform.testing import initializer
from mlops_platform.testing.objectstores import GCSServer


async def _fetch(uri: str, dest: Path, *args: str, tmp_path: Path) -> initializer.Run:
    return await initializer.fetch(uri, dest, *args, termination_log=tmp_path / "termination-log")


def _service_account_key(private_key: str) -> str:
    return json.dumps(
        {
            "type": "service_account",
            "project_id": "test",
            "private_key_id": "0123456789abcdef",
            "private_key": private_key,
            "client_email": "initializer@test.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": "https://oauth2.googleapis.com/token",
        }
    )


def _pem_rsa_key() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return pem.decode()


async def test_service_account_key_in_the_credentials_directory(
    fake_gcs_server: GCSServer, gcs_bucket: str, tmp_path: Path
) -> None:
    """The Secret's GOOGLE_SERVICE_ACCOUNT_KEY is what the initializer signs with: the emulator key
    (no OAuth), a real RSA service-account key (object_store signs a self-signed JWT, which the
    emulator accepts: it checks none) and that key with its private key broken (refused before any
    request) all come from the mounted directory; ``--endpoint`` is the store's base URL."""
    await fake_gcs_server.upload(gcs_bucket, "iris/model.joblib", b"iris weights")
    uri = f"gs://{gcs_bucket}/iris/model.joblib"
    pem = _pem_rsa_key()
    broken = pem.replace(pem.splitlines()[3], "A" * len(pem.splitlines()[3]))
    for i, (key, ok) in enumerate(
        [
            (fake_gcs_server.service_account_key(), True),
            (_service_account_key(pem), True),
            (_service_account_key(broken), False),
        ]
    ):
        creds = initializer.credentials_dir(tmp_path / f"secret-{i}", {"GOOGLE_SERVICE_ACCOUNT_KEY": key})
        dest = tmp_path / f"models-{i}"
        run = await _fetch(
            uri, dest, "--credentials", str(creds), "--endpoint", fake_gcs_server.endpoint, tmp_path=tmp_path
        )
        if ok:
            assert run.code == 0, (i, run.stderr)
            assert initializer.files(dest) == {"model.joblib": b"iris weights"}
        else:
            assert run.code == 1
            assert run.failure_line.startswith(f"model download failed: {uri}: "), run.failure_line
            assert "key" in run.failure_line.lower(), run.failure_line
            assert "AAAAAAAA" not in run.stderr  # the key never reaches the log


async def test_a_key_naming_a_plain_http_endpoint_needs_no_endpoint_flag(
    fake_gcs_server: GCSServer, gcs_bucket: str, tmp_path: Path
) -> None:
    """An emulator's key alone (its ``gcs_base_url`` is http://) reaches it: plain HTTP is allowed
    for the endpoint the key names."""
    await fake_gcs_server.upload(gcs_bucket, "iris/model.joblib", b"iris weights")
    uri = f"gs://{gcs_bucket}/iris/model.joblib"
    key = fake_gcs_server.service_account_key()
    assert '"gcs_base_url": "http://' in key.replace('":"', '": "')
    creds = initializer.credentials_dir(tmp_path / "secret", {"GOOGLE_SERVICE_ACCOUNT_KEY": key})
    run = await _fetch(uri, tmp_path / "models", "--credentials", str(creds), tmp_path=tmp_path)
    assert run.code == 0, run.stderr
    assert initializer.files(tmp_path / "models") == {"model.joblib": b"iris weights"}


async def test_malformed_service_account_key_fails_with_one_line(
    fake_gcs_server: GCSServer, gcs_bucket: str, tmp_path: Path
) -> None:
    await fake_gcs_server.upload(gcs_bucket, "k/model.bin", b"x")
    creds = initializer.credentials_dir(tmp_path / "secret", {"GOOGLE_SERVICE_ACCOUNT_KEY": "{not json"})
    run = await _fetch(
        f"gs://{gcs_bucket}/k/model.bin",
        tmp_path / "models",
        "--credentials",
        str(creds),
        "--endpoint",
        fake_gcs_server.endpoint,
        tmp_path=tmp_path,
    )
    assert run.code == 1
    assert run.failure_line.startswith(
        "model download failed: credentials: GOOGLE_SERVICE_ACCOUNT_KEY is not JSON"
    ), run.failure_line
    assert "{not json" not in run.stderr  # the key's value never reaches the log
