"""The storage initializer as a real process (``python -m mlops_platform.storage fetch``) against a
real local HTTP server (aiohttp on 127.0.0.1, a free port): single files, archives, checksums,
Authorization, 404, connections dropped mid-download, and a 2 GiB artifact in bounded memory.

No cluster is needed: these tests use none of the cluster fixtures.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from mlops_platform.testing.initializer import Run, fetch, tar
from mlops_platform.testing.initializer import files as delivered

TOKEN = "Bearer s3cret-token"
GIB = 1 << 30
#: the acceptance bound of the initializer's peak RSS for the 2 GiB artifact
RSS_BOUND_MIB = 256
#: runs one command and prints its exit code, peak RSS (KiB) and wall time as JSON: the only child
#: of this wrapper is the initializer, so RUSAGE of os.wait4 is the initializer's own
_MEASURE = """
import json, os, sys, time
start = time.monotonic()
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)
_, status, usage = os.wait4(pid, 0)
print(json.dumps({"code": os.waitstatus_to_exitcode(status), "maxrss_kib": usage.ru_maxrss,
                  "seconds": time.monotonic() - start}))
"""


def _read(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)  # sparse: instant, and reads back as zeros


class ModelServer:
    """Serves files of ``root`` under a few behaviours; records each request's path and Range."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[tuple[str, str | None]] = []
        self.url = ""
        #: the next N requests of /drop/ and /norange/ break off after this share of the body
        self.drops = 1

    def file(self, request: web.Request) -> Path:
        path = self.root / request.match_info["name"]
        if not path.is_file():
            raise web.HTTPNotFound()
        return path

    async def files(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.path, request.headers.get("Range")))
        return web.FileResponse(self.file(request))

    async def auth(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.path, request.headers.get("Range")))
        given = request.headers.get("Authorization")
        if given is None:
            raise web.HTTPUnauthorized(text="authorization required")
        if given != TOKEN:
            raise web.HTTPForbidden(text="wrong token")
        return web.FileResponse(self.file(request))

    async def _drop(self, request: web.Request, path: Path) -> web.StreamResponse:
        """Announce the whole file (with the validators FileResponse sends), send a third of it, then
        close the connection."""
        self.drops -= 1
        data, mtime = await asyncio.to_thread(_read, path)
        headers = {"Content-Length": str(len(data)), "ETag": f'"{mtime:x}-{len(data):x}"'}
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        await response.write(data[: len(data) // 3])
        assert request.transport is not None
        request.transport.close()
        return response

    async def drop(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.path, request.headers.get("Range")))
        path = self.file(request)
        if self.drops > 0:
            return await self._drop(request, path)
        return web.FileResponse(path)  # ranges honoured: the download resumes

    async def norange(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.path, request.headers.get("Range")))
        path = self.file(request)
        if self.drops > 0:
            return await self._drop(request, path)
        data, _ = await asyncio.to_thread(_read, path)
        return web.Response(body=data)  # 200 and the whole body, whatever was asked


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ModelServer]:
    (tmp_path / "srv").mkdir()
    state = ModelServer(tmp_path / "srv")
    app = web.Application()
    app.router.add_get("/files/{name}", state.files)
    app.router.add_get("/auth/{name}", state.auth)
    app.router.add_get("/drop/{name}", state.drop)
    app.router.add_get("/norange/{name}", state.norange)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    assert runner.addresses
    host, port = runner.addresses[0][:2]
    state.url = f"http://{host}:{port}"
    try:
        yield state
    finally:
        await runner.cleanup()


async def initializer(tmp_path: Path, uri: str, dest: str, *args: str) -> Run:
    """The initializer as a real process (``testing.initializer.fetch``); it prints nothing on stdout."""
    run = await fetch(uri, Path(dest), *args, termination_log=tmp_path / "termination-log")
    assert run.stdout == ""
    return run


def files(root: Path) -> list[str]:
    return sorted(delivered(root))


def put(server: ModelServer, name: str, data: bytes) -> str:
    (server.root / name).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


async def fetch_checked(
    server: ModelServer, tmp_path: Path, name: str, data: bytes, *args: str
) -> tuple[Run, Path]:
    """``data`` served as ``files/<name>``, fetched into ``tmp_path/models`` with ``args`` and its
    checksum (``--sha256``); the run and the directory."""
    sha = put(server, name, data)
    dest = tmp_path / "models"
    return await initializer(tmp_path, f"{server.url}/files/{name}", str(dest), *args, "--sha256", sha), dest


async def test_single_file_with_checksum_as_a_triton_model(server: ModelServer, tmp_path: Path) -> None:
    data = os.urandom(3 << 20)
    run, dest = await fetch_checked(server, tmp_path, "resnet.onnx", data, "--layout=triton", "--name=resnet")
    assert (run.code, run.termination) == (0, ""), run.stderr
    assert files(dest) == ["resnet/1/model.onnx", "resnet/config.pbtxt"]
    assert (dest / "resnet/1/model.onnx").read_bytes() == data
    done = [d for d in run.logs() if d["msg"] == "downloaded"]
    assert len(done) == 1
    assert {k: done[0][k] for k in ("uri", "file", "bytes", "total", "percent")} == {
        "uri": f"{server.url}/files/resnet.onnx",
        "file": "resnet.onnx",
        "bytes": len(data),
        "total": len(data),
        "percent": 100.0,
    }


async def test_checksum_mismatch_fails_and_leaves_nothing(server: ModelServer, tmp_path: Path) -> None:
    sha = put(server, "model.joblib", b"model bytes")
    dest = tmp_path / "models"
    run = await initializer(tmp_path, f"{server.url}/files/model.joblib", str(dest), "--sha256", "0" * 64)
    line = (
        f"model download failed: {server.url}/files/model.joblib: sha256 mismatch: "
        f"expected {'0' * 64}, got {sha}\n"
    )
    assert (run.code, run.termination) == (1, line)
    assert run.stderr.endswith(line)
    assert list(dest.iterdir()) == []


async def test_archive_unpacks_into_the_layout(server: ModelServer, tmp_path: Path) -> None:
    archive = tar({"config.pbtxt": b'name: "upstream"\nbackend: "onnxruntime"\n', "1/model.onnx": b"w"})
    run, dest = await fetch_checked(
        server, tmp_path, "model.tgz", archive, "--layout", "triton", "--name", "iris"
    )
    assert run.code == 0, run.stderr
    assert files(dest) == ["iris/1/model.onnx", "iris/config.pbtxt"]
    assert (dest / "iris/config.pbtxt").read_text() == 'name: "iris"\nbackend: "onnxruntime"\n'


async def test_unsafe_archive_fails(server: ModelServer, tmp_path: Path) -> None:
    put(server, "evil.tar", tar({"../../escape.txt": b"x"}, gzip=False))
    run = await initializer(tmp_path, f"{server.url}/files/evil.tar", str(tmp_path / "a" / "models"))
    assert run.code == 1
    assert run.termination.startswith("model download failed: unsafe member in evil.tar: ")
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "a" / "escape.txt").exists()


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (TOKEN, None),
        ("Bearer wrong", "access to {url} denied: 403 Forbidden"),
        (None, "not authenticated for {url}: 401 Unauthorized"),
    ],
)
async def test_authorization_from_the_credentials_directory(
    server: ModelServer, tmp_path: Path, token: str | None, reason: str | None
) -> None:
    put(server, "model.onnx", b"secret model")
    creds = tmp_path / "secret"
    creds.mkdir()
    if token is not None:
        (creds / "HTTP_AUTHORIZATION").write_text(token + "\n")
    url = f"{server.url}/auth/model.onnx"
    run = await initializer(tmp_path, url, str(tmp_path / "models"), "--credentials", str(creds))
    if reason is None:
        assert run.code == 0, run.stderr
        assert (tmp_path / "models/model.onnx").read_bytes() == b"secret model"
    else:
        assert (run.code, run.termination) == (1, f"model download failed: {reason.format(url=url)}\n")
    assert token is None or token not in run.stderr  # the credential never reaches the log


async def test_404_names_the_url(server: ModelServer, tmp_path: Path) -> None:
    url = f"{server.url}/files/missing.onnx"
    run = await initializer(tmp_path, url, str(tmp_path / "models"))
    assert (run.code, run.termination) == (1, f"model download failed: no object at {url}\n")


async def _whole_after_a_drop(server: ModelServer, tmp_path: Path, route: str) -> tuple[bytes, Run]:
    """6 MiB fetched through ``route`` (one that drops the first connection), checksum given: the
    file arrived whole and verified. The data and the run."""
    data = os.urandom(6 << 20)
    sha = put(server, "model.pt", data)
    run = await initializer(
        tmp_path, f"{server.url}/{route}/model.pt", str(tmp_path / "models"), "--sha256", sha
    )
    assert run.code == 0, run.stderr
    assert (tmp_path / "models/model.pt").read_bytes() == data
    return data, run


async def test_a_dropped_connection_resumes_with_a_range(server: ModelServer, tmp_path: Path) -> None:
    data, _ = await _whole_after_a_drop(server, tmp_path, "drop")
    ranges = [r for _, r in server.requests]
    assert ranges[0] is None
    assert len(ranges) == 2 and ranges[1] is not None and ranges[1].startswith("bytes=")
    resumed_at = int(ranges[1].removeprefix("bytes=").split("-")[0])
    assert 0 < resumed_at <= len(data) // 3


async def test_a_dropped_connection_without_range_support_restarts_cleanly(
    server: ModelServer, tmp_path: Path
) -> None:
    _, run = await _whole_after_a_drop(server, tmp_path, "norange")
    assert [r is None for _, r in server.requests] == [True, False, True]  # whole, ranged (refused), whole
    assert any(d["msg"] == "download interrupted, retrying" and d["from_start"] for d in run.logs())
    assert files(tmp_path / "models") == ["model.pt"]


async def test_a_2gib_artifact_streams_in_bounded_memory(server: ModelServer, tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    # an acceptance figure of the issue: a machine without the room fails here, it is not skipped
    assert free >= 3 * GIB, (
        f"needs 3 GiB free in {tmp_path} (2 GiB downloaded, a margin), has {free >> 20} MiB"
    )
    size = 2 * GIB
    _sparse(server.root / "big.bin", size)

    def zeros_sha256() -> str:
        digest, block = hashlib.sha256(), bytes(1 << 20)
        for _ in range(size // len(block)):
            digest.update(block)
        return digest.hexdigest()

    sha = await asyncio.to_thread(zeros_sha256)
    dest = tmp_path / "models"
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _MEASURE,
            sys.executable,
            "-m",
            "mlops_platform.storage",
            "fetch",
            f"{server.url}/files/big.bin",
            str(dest),
            "--sha256",
            sha,
            "--termination-log",
            str(tmp_path / "termination-log"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 540)
        measured = json.loads(out)
        assert measured["code"] == 0, err.decode()[-2000:]
        assert (dest / "big.bin").stat().st_size == size
        rss_mib = measured["maxrss_kib"] / 1024
        seconds = measured["seconds"]
        delivered = next(
            json.loads(line) for line in err.decode().splitlines() if '"model delivered"' in line
        )
        progress = [json.loads(line) for line in err.decode().splitlines() if '"downloading"' in line]
        print(
            f"\n2 GiB over HTTP: peak RSS {rss_mib:.0f} MiB, {seconds:.1f} s wall "
            f"({size / (1 << 20) / seconds:.0f} MiB/s including start-up and sha256), "
            f"download {delivered['seconds']} s ({delivered['mib_per_second']} MiB/s), "
            f"{len(progress)} progress lines"
        )
        assert rss_mib < RSS_BOUND_MIB
        assert progress, "no progress line during the download"
    finally:
        (server.root / "big.bin").unlink(missing_ok=True)
        shutil.rmtree(dest, ignore_errors=True)
