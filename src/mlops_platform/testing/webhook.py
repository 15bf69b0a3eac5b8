"""The conversion webhook for a test session: one ``mlops-platform webhook`` process, and the CRD
installed to call it.

The CRD converts by webhook, so every cluster that stores InferenceServices needs one serving it
(a cluster-wide dependency, like in production). The pytest plugin starts :func:`serving` once per
session: a real process with self-managed certificates (its Secret in ``mlops-system``) that the
real API server calls over verified TLS; :func:`install_crd` installs the CRD pointing at it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mlops_platform.api import CRD_NAME, crd
from mlops_platform.runtime import wait
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

#: where the session's webhook listens (set by :func:`serving`, read by :func:`install_crd`)
URL_ENV = "MLOPS_TEST_WEBHOOK_URL"
SECRET = ("mlops-system", "mlops-platform-webhook-tls-test")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def url() -> str:
    value = os.environ.get(URL_ENV)
    if not value:
        raise RuntimeError(
            f"no conversion webhook in this session (${URL_ENV} unset): use the plugin's fixtures"
        )
    return value


async def install_crd(client: rclient.Client) -> dict[str, Any]:
    """Install (or re-apply) the CRD calling the session's webhook; wait until it is Established."""
    return await crd.install(client, webhook_url=url())


async def ca_bundle(client: rclient.Client) -> bytes:
    live = await client.get(resources.CRD, CRD_NAME)
    raw = (
        ((live["spec"].get("conversion") or {}).get("webhook") or {}).get("clientConfig", {}).get("caBundle")
    )
    return base64.b64decode(raw) if raw else b""


async def ensure_namespace(client: rclient.Client, name: str) -> None:
    with contextlib.suppress(rclient.ApiError):
        await client.create(
            resources.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )


@contextlib.asynccontextmanager
async def serving(
    kubeconfig: Path,
    client: rclient.Client,
    *,
    log_path: Path,
    port: int | None = None,
    extra_args: tuple[str, ...] = (),
    timeout: float = 60.0,
) -> AsyncIterator[str]:
    """A ``mlops-platform webhook`` process serving the CRD's conversions; yields its URL once the
    CRD is installed against it and its CA bundle injected. Stopped (SIGTERM) on exit."""
    port = port or free_port()
    address = f"https://127.0.0.1:{port}/convert"
    await ensure_namespace(client, SECRET[0])
    await crd.install(client, webhook_url=address)
    cmd = [
        sys.executable, "-m", "mlops_platform.cli", "webhook",
        "--kubeconfig", str(kubeconfig),
        "--webhook-bind-address", f"127.0.0.1:{port}",
        "--webhook-secret", "/".join(SECRET),
        *extra_args,
    ]  # fmt: skip
    with log_path.open("ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # noqa: ASYNC220
    try:

        async def injected() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the webhook process exited ({proc.returncode}); log: {log_path}")
            return bool(await ca_bundle(client))

        await wait.until(injected, timeout=timeout, what="the conversion webhook's CA bundle in the CRD")
        previous = os.environ.get(URL_ENV)
        os.environ[URL_ENV] = address
        try:
            yield address
        finally:
            if previous is None:
                os.environ.pop(URL_ENV, None)
            else:
                os.environ[URL_ENV] = previous
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, 15)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)
