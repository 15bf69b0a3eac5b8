"""A test server as a real local process (:mod:`~mlops_platform.testing.objectstores`' MinIO and
fake-gcs-server): started on fresh free ports (again on new ones if it exits while starting: another
process may take a port between choosing and binding it), its output in a log file, polled until
ready (:func:`mlops_platform.testing.wait.until`), and stopped on exit (SIGTERM, then SIGKILL after
``STOP_TIMEOUT``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path

import aiohttp

from mlops_platform.devcluster import logs
from mlops_platform.testing.wait import until

__all__ = ["START_ATTEMPTS", "Launch", "ServerExited", "ServerProcess", "make_scratch", "serving"]

STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0


@dataclasses.dataclass
class ServerProcess:
    """A started server process: its log file, and how to stop it."""

    name: str
    process: asyncio.subprocess.Process
    log_path: Path

    def log_tail(self, lines: int = 30) -> str:
        return logs.tail(self.log_path, lines)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``STOP_TIMEOUT``; reaped either way."""
        if self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()
        try:
            await asyncio.wait_for(self.process.wait(), STOP_TIMEOUT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()


class ServerExited(RuntimeError):
    """The server process ended before it was ready."""


#: builds a server's command line on fresh free ports: ``(argv, the endpoint URL it will serve)``
Launch = Callable[[], tuple[list[str], str]]
#: tries to start a server: another process may take a port between free_port() and the bind
START_ATTEMPTS = 3


async def _start(name: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> ServerProcess:
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,  # a Ctrl-C of the run stops it through our exit (SIGTERM), not mid-test
        )
    return ServerProcess(name, process, log_path)


async def _wait_ready(server: ServerProcess, ready_url: str) -> None:
    """Poll ``ready_url`` until it answers 200; :class:`ServerExited` at once if the process ends."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:

        async def ready() -> bool:
            code = server.process.returncode
            if code is not None:
                raise ServerExited(f"{server.name} exited with {code} while starting:\n{server.log_tail()}")
            async with http.get(ready_url) as answer:
                return answer.status == 200

        try:
            await until(
                ready,
                timeout=STARTUP_TIMEOUT,
                what=f"{server.name} ready at {ready_url}",
                retry_on=(aiohttp.ClientError, OSError, TimeoutError),
            )
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{server.name} log:\n{server.log_tail()}") from None


@contextlib.asynccontextmanager
async def serving(
    name: str, launch: Launch, ready_path: str, env: Mapping[str, str], log_path: Path
) -> AsyncIterator[tuple[ServerProcess, str]]:
    """Start the server ``launch`` describes and wait until ``<endpoint><ready_path>`` answers 200
    (on new ports again if it exits while starting, up to ``START_ATTEMPTS`` times); yield it and
    its endpoint, then stop it."""
    for attempt in range(1, START_ATTEMPTS + 1):
        argv, endpoint = launch()
        server = await _start(name, argv, env, log_path)
        try:
            await _wait_ready(server, endpoint + ready_path)
            break
        except ServerExited:
            await server.stop()
            if attempt == START_ATTEMPTS:
                raise
        except BaseException:
            await server.stop()
            raise
    try:
        yield server, endpoint
    finally:
        await server.stop()


def make_scratch(parent: Path, prefix: str) -> Path:
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
