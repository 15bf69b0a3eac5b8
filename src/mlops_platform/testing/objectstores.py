"""Real object-store servers for the storage initializer's tests: MinIO (S3-compatible, SigV4
credentials checked) and fake-gcs-server (the GCS JSON and XML APIs, no auth), each a real process
on a free 127.0.0.1 port with its data in a temporary directory.

::

    async with objectstores.minio(tmp_path) as s3:
        await s3.create_bucket("models")
        await s3.upload("models", "bert/1/model.pt", b"weights")      # bytes or a Path (multipart)
        store = s3.store("models")                                      # an obstore S3Store
    async with objectstores.fake_gcs(tmp_path) as gcs:
        await gcs.create_bucket("models")
        await gcs.upload("models", "bert/1/model.pt", Path("model.pt"))
        store = gcs.store("models")                                     # an obstore GCSStore

How a client reaches fake-gcs-server: obstore's (object_store's) ``GCSStore`` has no "emulator" switch,
but a service-account key JSON (``service_account_key=`` or the ``GOOGLE_SERVICE_ACCOUNT_KEY`` of
the initializer's ``--credentials`` directory) may carry ``"gcs_base_url"`` (the emulator's URL:
objects at ``<base>/<bucket>/<name>``, listings at ``<base>/storage/v1/b/<bucket>/o``) and
``"disable_oauth": true`` (a static empty bearer token: no OAuth token exchange, no metadata
server, no application default credentials); ``private_key``, ``private_key_id`` and
``client_email`` must be present but are not used then. :meth:`GCSServer.service_account_key`
returns that JSON. An explicit ``base_url=`` takes precedence over ``gcs_base_url``; plain HTTP
needs ``client_options={"allow_http": True}``.

On exit each server is stopped (SIGTERM, then SIGKILL after a timeout:
:mod:`~mlops_platform.testing.serverprocess`) and its data directory is removed: nothing is left
behind. Readiness is polled (:func:`mlops_platform.testing.wait.until`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import hashlib
import hmac
import json
import shutil
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import obstore
from obstore.store import GCSStore, S3Store

from mlops_platform.devcluster import binaries
from mlops_platform.testing import serverprocess
from mlops_platform.testing.ports import free_port

__all__ = ["GCSServer", "S3Server", "fake_gcs", "minio"]

# MinIO's root credentials of a test server (MinIO wants an access key >= 3 and a secret >= 8 chars)
ACCESS_KEY = "mlops-test-access"
SECRET_KEY = "mlops-test-secret-key"
REGION = "us-east-1"
# S3 uploads above this size go in parts (a multipart upload)
MULTIPART_CHUNK = 5 * 1024 * 1024
# the pieces of a GCS resumable upload (a multiple of 256 KiB, as GCS requires)
RESUMABLE_CHUNK = 4 * 1024 * 1024


# -- S3 (MinIO) ---------------------------------------------------------------------------------


def _sigv4_headers(
    method: str,
    url: str,
    *,
    region: str,
    access_key: str,
    secret_key: str,
    body: bytes = b"",
    now: datetime.datetime | None = None,
) -> dict[str, str]:
    """The AWS Signature Version 4 headers of one S3 request (service ``s3``, path-style URL,
    no query string): ``Authorization``, ``x-amz-date``, ``x-amz-content-sha256``."""
    parts = urllib.parse.urlsplit(url)
    when = now or datetime.datetime.now(datetime.UTC)
    amz_date = when.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    payload_hash = hashlib.sha256(body).hexdigest()
    headers = {"host": parts.netloc, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join(
        [
            method,
            urllib.parse.quote(parts.path or "/", safe="/-_.~"),
            parts.query,
            "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)),
            signed,
            payload_hash,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{secret_key}".encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return {
        "Authorization": f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
        f"SignedHeaders={signed}, Signature={signature}",
        "x-amz-date": amz_date,
        "x-amz-content-sha256": payload_hash,
    }


def s3_secret(name: str, access_key: str, secret_key: str) -> dict[str, Any]:
    """A Secret ``name`` with S3 credentials, as an InferenceService's model ``storage.secretName``
    names it (the initializer reads its keys as ``--credentials`` files)."""
    keys = {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": keys}


@dataclasses.dataclass(frozen=True)
class S3Server:
    """A running S3-compatible server (MinIO) and its root credentials."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str
    data_dir: Path
    process: serverprocess.ServerProcess

    def store(
        self,
        bucket: str,
        *,
        prefix: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> S3Store:
        """An obstore client of ``bucket`` (path-style, plain HTTP); other credentials on request,
        e.g. wrong ones. No retries: a test sees the server's answer at once."""
        return S3Store(
            bucket,
            prefix=prefix,
            endpoint=self.endpoint,
            region=self.region,
            access_key_id=access_key or self.access_key,
            secret_access_key=secret_key or self.secret_key,
            virtual_hosted_style_request=False,
            client_options={"allow_http": True},
            retry_config={"max_retries": 0},
        )

    def credentials_files(self) -> dict[str, str]:
        """The initializer's ``--credentials`` directory contents (file name -> value) for this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    async def create_bucket(self, bucket: str) -> None:
        """CreateBucket (a SigV4-signed ``PUT /<bucket>``: obstore has no bucket operations)."""
        url = f"{self.endpoint}/{bucket}"
        headers = _sigv4_headers(
            "PUT", url, region=self.region, access_key=self.access_key, secret_key=self.secret_key
        )
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
            http.put(url, headers=headers) as answer,
        ):
            if answer.status != 200:
                raise RuntimeError(f"create bucket {bucket}: {answer.status} {await answer.text()}")

    async def upload(self, bucket: str, key: str, data: bytes | Path) -> None:
        """Put ``data`` (bytes, or a file streamed from disk: a multipart upload above 5 MiB) at
        ``s3://bucket/key``."""
        await obstore.put_async(self.store(bucket), key, data, chunk_size=MULTIPART_CHUNK)


@contextlib.asynccontextmanager
async def minio(
    tmp_dir: Path,
    *,
    access_key: str = ACCESS_KEY,
    secret_key: str = SECRET_KEY,
    region: str = REGION,
    binary: Path | None = None,
) -> AsyncIterator[S3Server]:
    """A MinIO server on a free 127.0.0.1 port, its single drive in a new directory under ``tmp_dir``
    (removed on exit), root credentials ``access_key``/``secret_key``, ``region``."""
    exe = binary or binaries.object_store_server("minio")
    scratch = serverprocess.make_scratch(tmp_dir, "minio-")
    data = scratch / "data"

    def launch() -> tuple[list[str], str]:
        port = free_port()
        argv = [
            str(exe),
            "server",
            "--quiet",
            "--address",
            f"127.0.0.1:{port}",
            "--console-address",
            f"127.0.0.1:{free_port()}",
            "--certs-dir",
            str(scratch / "certs"),
            str(data),
        ]
        return argv, f"http://127.0.0.1:{port}"

    env = {
        "MINIO_ROOT_USER": access_key,
        "MINIO_ROOT_PASSWORD": secret_key,
        "MINIO_SITE_REGION": region,
        "MINIO_BROWSER": "off",
        "MINIO_UPDATE": "off",
        "HOME": str(scratch),  # MinIO writes nothing under the real home
    }
    try:
        # not /minio/health/ready: it answers 200 before the object layer is up (only a header says
        # "offline"), and a CreateBucket then got 503 XMinioServerNotInitialized; /cluster answers
        # 503 until the object layer, bucket metadata and IAM are initialized
        ready = "/minio/health/cluster"
        async with serverprocess.serving("minio", launch, ready, env, scratch / "minio.log") as (p, endpoint):
            yield S3Server(endpoint, access_key, secret_key, region, data, p)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# -- GCS (fake-gcs-server) ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GCSServer:
    """A running GCS emulator (fake-gcs-server: the JSON API under ``/storage/v1``, the XML API and
    downloads at ``/<bucket>/<object>``; no authentication)."""

    endpoint: str
    data_dir: Path
    process: serverprocess.ServerProcess

    def service_account_key(self) -> str:
        """A service-account key JSON that points obstore at this emulator with OAuth disabled."""
        return json.dumps(
            {
                "gcs_base_url": self.endpoint,
                "disable_oauth": True,
                "client_email": "",
                "private_key": "",
                "private_key_id": "",
            }
        )

    def store(self, bucket: str, *, prefix: str | None = None) -> GCSStore:
        """An obstore client of ``bucket`` on this emulator (see the module docstring). No retries."""
        return GCSStore(
            bucket,
            prefix=prefix,
            service_account_key=self.service_account_key(),
            client_options={"allow_http": True},
            retry_config={"max_retries": 0},
        )

    async def create_bucket(self, bucket: str) -> None:
        """The JSON API's ``buckets.insert`` (``POST /storage/v1/b``), as a real client would."""
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
            http.post(
                f"{self.endpoint}/storage/v1/b", params={"project": "test"}, json={"name": bucket}
            ) as answer,
        ):
            if answer.status != 200:
                raise RuntimeError(f"create bucket {bucket}: {answer.status} {await answer.text()}")

    async def upload(self, bucket: str, key: str, data: bytes | Path) -> None:
        """Put ``data`` at ``gs://bucket/key`` through the JSON API: bytes in one media upload, a file
        streamed from disk in a resumable upload of ``RESUMABLE_CHUNK`` pieces. (fake-gcs-server
        serves reads through the XML API, which obstore uses, but not its uploads: obstore cannot
        upload to it.)"""
        url = f"{self.endpoint}/upload/storage/v1/b/{bucket}/o"
        timeout = aiohttp.ClientTimeout(total=300)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            if isinstance(data, bytes):
                params = {"uploadType": "media", "name": key}
                async with http.post(url, params=params, data=data) as answer:
                    await _expect(answer, 200, f"upload gs://{bucket}/{key}")
                return
            params = {"uploadType": "resumable", "name": key}
            async with http.post(url, params=params, json={"name": key}) as answer:
                await _expect(answer, 200, f"start upload gs://{bucket}/{key}")
                session = answer.headers["Location"]
            size = (await asyncio.to_thread(data.stat)).st_size
            with await asyncio.to_thread(data.open, "rb") as f:
                offset = 0
                while True:
                    chunk = await asyncio.to_thread(f.read, RESUMABLE_CHUNK)
                    end = offset + len(chunk)
                    last = end >= size
                    span = f"bytes {offset}-{end - 1}/{size if last else '*'}" if chunk else f"bytes */{size}"
                    async with http.put(session, data=chunk, headers={"Content-Range": span}) as answer:
                        await _expect(answer, 200 if last else 308, f"upload gs://{bucket}/{key} at {offset}")
                    offset = end
                    if last:
                        return


async def _expect(answer: aiohttp.ClientResponse, status: int, what: str) -> None:
    if answer.status != status:
        raise RuntimeError(f"{what}: {answer.status} {await answer.text()}")


@contextlib.asynccontextmanager
async def fake_gcs(tmp_dir: Path, *, binary: Path | None = None) -> AsyncIterator[GCSServer]:
    """fake-gcs-server on a free 127.0.0.1 port (plain HTTP), its filesystem backend in a new
    directory under ``tmp_dir`` (removed on exit)."""
    exe = binary or binaries.object_store_server("fake-gcs-server")
    scratch = serverprocess.make_scratch(tmp_dir, "fake-gcs-")
    data = scratch / "data"

    def launch() -> tuple[list[str], str]:
        port = free_port()
        endpoint = f"http://127.0.0.1:{port}"
        argv = [
            str(exe),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-public-host",
            f"127.0.0.1:{port}",
            "-external-url",
            endpoint,
            "-backend",
            "filesystem",
            "-filesystem-root",
            str(data),
            "-log-level",
            "warn",
        ]
        return argv, endpoint

    try:
        log, ready = scratch / "fake-gcs-server.log", "/storage/v1/b"
        async with serverprocess.serving("fake-gcs-server", launch, ready, {}, log) as (p, endpoint):
            yield GCSServer(endpoint, data, p)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
