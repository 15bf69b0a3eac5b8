"""``store``: one bucket of each object-store server the initializer fetches from (MinIO for
``s3://``, fake-gcs-server for ``gs://``), for the behaviour both must show alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mlops_platform.testing import initializer
from mlops_platform.testing.objectstores import GCSServer, S3Server


@dataclasses.dataclass(frozen=True)
class Store:
    """A fresh bucket as the initializer reaches it: its URI scheme and the flags that give access
    (S3: a mounted-Secret directory with the endpoint, region and keys; GCS: the emulator's
    endpoint, no key)."""

    scheme: str
    bucket: str
    server: S3Server | GCSServer
    access: tuple[str, ...]

    def uri(self, key: str) -> str:
        return f"{self.scheme}://{self.bucket}/{key}"

    async def upload(self, key: str, data: bytes | Path) -> None:
        await self.server.upload(self.bucket, key, data)

    async def fetch(self, uri: str, dest: Path, *args: str, tmp_path: Path) -> initializer.Run:
        """The initializer as a process: ``uri`` into ``dest`` with this store's access flags."""
        return await initializer.fetch(
            uri, dest, *self.access, *args, termination_log=tmp_path / "termination-log"
        )


@pytest.fixture(params=["s3", "gs"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "s3":
        minio: S3Server = request.getfixturevalue("minio_server")
        secret = initializer.credentials_dir(tmp_path / "secret", minio.credentials_files())
        return Store("s3", request.getfixturevalue("s3_bucket"), minio, ("--credentials", str(secret)))
    gcs: GCSServer = request.getfixturevalue("fake_gcs_server")
    return Store("gs", request.getfixturevalue("gcs_bucket"), gcs, ("--endpoint", gcs.endpoint))
