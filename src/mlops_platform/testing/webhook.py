"""The conversion webhook for a test session: one ``mlops-platform webhook`` process, and the CRD
installed to call it.

The CRD converts by webhook, so every cluster that stores InferenceServices needs one serving it
(a cluster-wide dependency, like in production). The pytest plugin starts :func:`serving` once per
session: a real process with self-managed certificates (its Secret in ``mlops-system``) that the
real API server calls over verified TLS; :func:`install_crd` installs the CRD pointing at it.
A test that replaces the CRD or points it at another webhook wraps that in :func:`paused`: the
session's process is stopped meanwhile (it would re-inject its bundle into whatever CRD it finds)
and the CRD is restored, with that process's bundle injected, on exit.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mlops_platform.api import CRD_NAME, crd
from mlops_platform.deploy import crdinstall
from mlops_platform.runtime import wait
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.webhook import keeper
from mlops_platform.testing.ports import free_port

#: where the session's webhook listens (set by :func:`serving`, read by :func:`install_crd`)
URL_ENV = "MLOPS_TEST_WEBHOOK_URL"
SECRET = ("mlops-system", "mlops-platform-webhook-tls-test")


def url() -> str:
    value = os.environ.get(URL_ENV)
    if not value:
        raise RuntimeError(
            f"no conversion webhook in this session (${URL_ENV} unset): use the plugin's fixtures"
        )
    return value


async def install_crd(client: rclient.Client) -> dict[str, Any]:
    """Install (or re-apply) the CRD calling the session's webhook; return once it is Established
    AND the API server converts through this webhook: a CRD left by an earlier session names
    another port, and Established (already True) does not say the server took the new URL and its
    CA bundle (injected by the webhook process meanwhile)."""
    live = await crd.install(client, webhook_url=url())
    await until_converting(client)
    return live


async def until_converting(client: rclient.Client, timeout: float = 60.0) -> None:
    """Until the API server converts through the CRD's webhook (:func:`crd.converts`): the CRD
    showing a new caBundle does not say the server's conversion client has taken it."""
    await wait.until(
        lambda: crd.converts(client),
        timeout=timeout,
        what="the API server converting through the session's webhook",
    )


async def ca_bundle(client: rclient.Client) -> bytes:
    raw = crdinstall.client_config(await client.get(resources.CRD, CRD_NAME)).get("caBundle")
    return base64.b64decode(raw) if raw else b""


async def stored_bundle(client: rclient.Client, secret: tuple[str, str] = SECRET) -> bytes:
    """The CA bundle a webhook process keeps in its ``secret`` (empty while it has none)."""
    try:
        live = await client.get(resources.SECRET, secret[1], secret[0])
    except rclient.ApiError as e:
        if e.not_found:
            return b""
        raise
    raw = (live.get("data") or {}).get(keeper.BUNDLE)
    return base64.b64decode(raw) if raw else b""


async def delete_secret(client: rclient.Client, secret: tuple[str, str]) -> None:
    """Delete a webhook's certificate Secret (namespace, name) if it exists: its next process starts
    from a fresh CA."""
    try:
        await client.delete(resources.SECRET, secret[1], secret[0])
    except rclient.ApiError as e:
        if not e.not_found:
            raise


class _Process:
    """One ``mlops-platform webhook`` process, stopped and started again on the same port and Secret."""

    def __init__(self, cmd: list[str], log_path: Path, secret: tuple[str, str], port: int) -> None:
        self.cmd, self.log_path, self.secret, self.port = cmd, log_path, secret, port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    async def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(proc.wait, 15)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait)

    async def wait_injected(self, client: rclient.Client, timeout: float) -> bytes:
        """Wait until the CRD trusts exactly the bundle this process keeps in its Secret."""

        async def injected() -> bytes | None:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise RuntimeError(f"the webhook process is not running ({code}); log: {self.log_path}")
            stored = await stored_bundle(client, self.secret)
            return stored if stored and await ca_bundle(client) == stored else None

        what = f"the CA bundle of the webhook ({'/'.join(self.secret)}) in the CRD"
        bundle = await wait.until(injected, timeout=timeout, what=what)
        # the Secret and the CRD may still carry this Secret's bundle from an earlier session: then
        # it is "injected" before this process listens, and the first conversion would be refused
        await wait.until(self._listening, timeout=timeout, what=f"the webhook listening on {self.port}")
        return bundle

    async def _listening(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            raise RuntimeError(f"the webhook process is not running ({code}); log: {self.log_path}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True


#: the processes :func:`serving` runs, by URL (:func:`paused` stops and restarts the session's)
_PROCESSES: dict[str, _Process] = {}


@contextlib.asynccontextmanager
async def serving(
    kubeconfig: Path,
    client: rclient.Client,
    *,
    log_path: Path,
    port: int | None = None,
    secret: tuple[str, str] = SECRET,
    extra_args: tuple[str, ...] = (),
    timeout: float = 60.0,
) -> AsyncIterator[str]:
    """A ``mlops-platform webhook`` process (certificates in ``secret``) serving the CRD's
    conversions; yields its URL once the CRD is installed against it and the bundle of its Secret
    injected (not merely some bundle: another webhook's may still be there). While it runs,
    :func:`url` is its URL. Stopped (SIGTERM) on exit."""
    port = port or free_port()
    address = f"https://127.0.0.1:{port}/convert"
    await crdinstall.ensure_namespace(client, secret[0])
    await crd.install(client, webhook_url=address)
    cmd = [
        sys.executable, "-m", "mlops_platform.cli", "webhook",
        "--kubeconfig", str(kubeconfig),
        "--webhook-bind-address", f"127.0.0.1:{port}",
        "--webhook-secret", "/".join(secret),
        *extra_args,
    ]  # fmt: skip
    process = _Process(cmd, log_path, secret, port)
    process.start()
    try:
        await process.wait_injected(client, timeout)
        previous = os.environ.get(URL_ENV)
        os.environ[URL_ENV] = address
        _PROCESSES[address] = process
        try:
            yield address
        finally:
            _PROCESSES.pop(address, None)
            if previous is None:
                os.environ.pop(URL_ENV, None)
            else:
                os.environ[URL_ENV] = previous
    finally:
        await process.stop()


@contextlib.asynccontextmanager
async def paused(client: rclient.Client, *, timeout: float = 60.0) -> AsyncIterator[None]:
    """The session's webhook process stopped for the block (so it does not re-inject its bundle into
    a CRD another test installed); on exit, even on error, the current CRD installed against it
    again, the process started again, its bundle injected and conversions through it working."""
    process = _PROCESSES.get(url())
    if process is None:
        raise RuntimeError(f"no webhook process serves {url()} in this session")
    await process.stop()
    try:
        yield
    finally:
        # whoever re-pointed it (kubectl, Helm: another field manager's `service`, which an apply
        # of the URL would leave beside it, invalid), the session's URL takes the conversion back
        await crdinstall.repoint(client, url())
        await crd.install(client, webhook_url=url())
        process.start()
        await process.wait_injected(client, timeout)
        await until_converting(client, timeout)
