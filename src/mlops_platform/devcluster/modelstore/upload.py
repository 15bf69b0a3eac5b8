"""``python -m mlops_platform.devcluster.modelstore.upload DIR --endpoint URL --bucket B``: put every
file under ``DIR`` into the bucket at its relative path (the model store's seeding Job runs it in the
operator's image). Credentials: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` in the environment.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
import obstore
from obstore.store import S3Store


@click.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--endpoint", required=True, help="the S3 endpoint (http://minio.mlops-models.svc:9000)")
@click.option("--bucket", required=True)
def main(directory: Path, endpoint: str, bucket: str) -> None:
    store = S3Store(
        bucket,
        endpoint=endpoint,
        access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        region="us-east-1",
        client_options={"allow_http": endpoint.startswith("http://")},
    )
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    for i, f in enumerate(files, 1):
        key = f.relative_to(directory).as_posix()
        obstore.put(store, key, f)
        click.echo(f"[{i}/{len(files)}] uploaded s3://{bucket}/{key} ({f.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
