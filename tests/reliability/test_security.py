"""Scenario 11, security basics: one ``mlops-platform run`` process started with NO bind flag, as a
ServiceAccount bound to exactly the generated RBAC (namespaced mode: the test's namespace), logging
at debug level, serving the conversion webhook the API server calls during the test (the CRD
points at the process's default webhook address; the session's webhook is paused meanwhile).

- (a) loopback by default: every socket the process listens on (its ``/proc`` entries: TCP in
  LISTEN, any bound UDP) is on 127.0.0.1, and they are exactly the defaults of the health probes
  (8081), metrics (8080) and the conversion webhook (9443). The install manifests and the chart
  set ``0.0.0.0`` explicitly for in-cluster use.
- (b) the webhook requires TLS 1.2+: handshakes with a client context forced to TLS 1.0 or 1.1
  (``maximum_version``, OpenSSL security level 0 so that this client CAN speak them) fail, 1.2 and
  1.3 complete and verify against the CA of the process's Secret. The control: the same client
  contexts complete TLS 1.0 and 1.1 with a server of the test's own that allows them (serving the
  webhook's own certificate), so a refusal is the webhook's, not this machine's OpenSSL.
- (c) only its generated RBAC: it converges two InferenceServices to Ready (one fetching its model
  with a storage Secret), and its ``rest_client_requests_by_resource_total`` shows every request it
  made covered by the declared rules and none answered 401 or 403.
- (d) no token, certificate or key material in its debug log, its /metrics, the namespace's Events,
  the InferenceServices (status included) or their Deployments: not the ServiceAccount token it
  runs with, no JWT (``eyJ...``), no ``-----BEGIN`` or ``PRIVATE KEY``, none of the webhook
  Secret's certificates and keys (as stored, base64, or a line of their PEM), none of the admin
  kubeconfig's client certificate and key, none of the storage Secret's values (nor their base64).
  The scanner is checked to find each kind of needle in a text made for it.

The process is stopped with SIGTERM (exit code 0) before its log is read. Run with ``-s`` for the
figures.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import secrets
import socket
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

import click
import yaml

import mlops_platform
from mlops_platform import api
from mlops_platform.api import crd
from mlops_platform.cli import operator as cli_operator
from mlops_platform.deploy import rbac as deploy_rbac
from mlops_platform.runtime import rbac
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.webhook import keeper
from mlops_platform.testing import hostports, identity, isvc, operator, wait, webhook
from mlops_platform.testing.scenario import Scenario, one_replica
from mlops_platform.webhooks import serve

ISVC = isvc.RESOURCE  # v1alpha1 objects: every request is converted by the process under test
#: acceptance bound: process start -> both InferenceServices Ready (the waits' timeouts are longer);
#: 15 s with the machine to itself, 30.3 s once in make test's three groups on 2 cores (load 14)
READY_WITHIN = 45.0
TIMEOUT = 90.0
LOOPBACK = "127.0.0.1"
#: what the scanner looks for besides the known secrets: a JWT (header and payload are base64url
#: JSON objects, so both start ``eyJ``), PEM armour, and any private key's marker
PATTERNS = {
    "a JWT": re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}"),
    "PEM armour": re.compile(r"-----BEGIN"),
    "a private key marker": re.compile(r"PRIVATE KEY"),
}
STORAGE_SECRET = "model-creds"
_SRC = Path(mlops_platform.__file__).resolve().parents[1]  # the directory holding the package


def _defaults() -> dict[str, str]:
    """The bind flags of ``mlops-platform run`` and their defaults (what the process gets)."""
    assert isinstance(cli_operator.run, click.Command)
    return {
        str(p.name): str(p.default)
        for p in cli_operator.run.params
        if p.name and p.name.endswith("bind_address") and isinstance(p.default, str)
    }


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def _address(hex_address: str) -> str:
    """An address of ``/proc/net/tcp{,6}`` (host byte order in 32-bit words) as text."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, words)


def listening(pid: int) -> list[tuple[str, str, int]]:
    """(protocol, address, port) of every socket process ``pid`` listens on: TCP in LISTEN and any
    bound UDP socket, from its file descriptors and its network namespace's tables."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # a descriptor closed meanwhile
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    out = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        for line in Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if inode not in inodes or (proto.startswith("tcp") and state != "0A"):  # 0A: LISTEN
                continue
            host, _, port = local.partition(":")
            out.append((proto, _address(host), int(port, 16)))
    return sorted(out)


def _holder(port: int) -> str:
    """Who listens on 127.0.0.1:``port`` already, for the failure message."""
    with socket.socket() as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError as e:
            return f"port {port} is taken ({e.strerror})"
    return ""


def _pem_lines(pem: str) -> list[str]:
    """The base64 lines of a PEM text long enough to be unique (not the armour, not a short tail)."""
    return [line.strip() for line in pem.splitlines() if len(line.strip()) >= 40 and "-----" not in line]


def _secret_needles(what: str, value: str) -> Iterator[tuple[str, str]]:
    """``value`` as it may show: itself, base64 (as in a Secret's ``data``), and the lines of a PEM."""
    yield what, value
    yield f"{what} (base64)", base64.b64encode(value.encode()).decode()
    for i, line in enumerate(_pem_lines(value)):
        yield f"{what} (PEM line {i + 1})", line


def _kubeconfig_needles(kubeconfig: Path) -> Iterator[tuple[str, str]]:
    """The client certificate and key (and token, if any) of every user of ``kubeconfig``."""
    conf = yaml.safe_load(kubeconfig.read_text())
    for user in conf.get("users") or ():
        creds = user.get("user") or {}
        for key in ("client-certificate", "client-key"):
            if creds.get(f"{key}-data"):
                yield from _secret_needles(
                    f"kubeconfig {key}", base64.b64decode(creds[f"{key}-data"]).decode()
                )
            elif creds.get(key):
                path = Path(creds[key])
                path = path if path.is_absolute() else kubeconfig.parent / path
                yield from _secret_needles(f"kubeconfig {key}", path.read_text())
        if creds.get("token"):
            yield "kubeconfig token", str(creds["token"])


def findings(text: str, needles: Mapping[str, str]) -> list[str]:
    """What of ``needles`` (what -> exact string) and :data:`PATTERNS` occurs in ``text``."""
    found = [what for what, needle in needles.items() if needle and needle in text]
    found += [f"{what} ({m.group(0)[:24]}...)" for what, p in PATTERNS.items() if (m := p.search(text))]
    return found


def _client_context(version: ssl.TLSVersion, ca_pem: str) -> ssl.SSLContext:
    """A verifying client context that speaks exactly ``version`` (security level 0: OpenSSL 3
    refuses TLS 1.0/1.1 at its default level, which would make the refusal the client's)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    with warnings.catch_warnings():  # TLS 1.0 and 1.1 are deprecated: forcing them is the test
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ctx.maximum_version = version
    ctx.set_ciphers("ALL:@SECLEVEL=0")
    ctx.load_verify_locations(cadata=ca_pem)
    return ctx


def _handshake(port: int, version: ssl.TLSVersion, ca_pem: str) -> str:
    """The TLS version negotiated with 127.0.0.1:``port``, or ``"refused: <error>"`` (blocking)."""
    with socket.create_connection((LOOPBACK, port), timeout=10) as raw:
        try:
            with _client_context(version, ca_pem).wrap_socket(raw, server_hostname=LOOPBACK) as tls:
                return str(tls.version())
        except (ssl.SSLError, ConnectionError) as e:
            return f"refused: {e}"


@contextlib.asynccontextmanager
async def _permissive_server(cert_pem: bytes, key_pem: bytes, tmp: Path) -> AsyncIterator[int]:
    """The control: a TLS server on a free loopback port that accepts TLS 1.0 and up, serving
    ``cert_pem``; yields its port."""
    cert, key = tmp / "control.crt", tmp / "control.key"
    cert.write_bytes(cert_pem)
    key.touch(0o600)
    key.write_bytes(key_pem)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():  # TLS 1.0 is deprecated: that is the point of the control
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.set_ciphers("ALL:@SECLEVEL=0")
    ctx.load_cert_chain(cert, key)

    async def close(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.close()

    srv = await asyncio.start_server(close, LOOPBACK, 0, ssl=ctx)
    try:
        yield int(srv.sockets[0].getsockname()[1])
    finally:
        srv.close()
        await srv.wait_closed()
        key.unlink()


VERSIONS = (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1, ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
_METRIC = re.compile(r"^rest_client_requests_by_resource_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def requests_made(metrics: str) -> dict[tuple[str, str, str], int]:
    """(verb, resource, code) -> count, from ``rest_client_requests_by_resource_total``."""
    out: dict[tuple[str, str, str], int] = {}
    for line in metrics.splitlines():
        if m := _METRIC.match(line):
            labels = dict(_LABEL.findall(m["labels"]))
            out[(labels["verb"], labels["resource"], labels["code"])] = int(float(m["value"]))
    return out


def _start(kubeconfig: Path, log: Path, namespace: str) -> operator.Process:
    """``mlops-platform run`` with no bind flag: its ServiceAccount's kubeconfig, the namespace its
    RBAC allows, the webhook Secret its Role names, debug logs to ``log``."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "mlops_platform.cli", "run",
                "--kubeconfig", str(kubeconfig),
                "--namespace", namespace,
                "--webhook-secret", f"{namespace}/{serve.SECRET[1]}",
                "--log-level", "debug",
            ],
            stdout=subprocess.DEVNULL,
            stderr=out,
            env={**os.environ, "PYTHONPATH": str(_SRC)},
        )  # fmt: skip
    return operator.Process(proc, f"{socket.gethostname()}_{proc.pid}", log)  # its ports: from its log


async def _tls_versions(port: int, ca_pem: str) -> dict[str, str]:
    """TLS version asked -> what the server at ``port`` negotiated (or why it refused)."""
    out = {}
    for v in VERSIONS:
        out[v.name] = await asyncio.to_thread(_handshake, port, v, ca_pem)
    return out


async def test_security_basics(scenario: Scenario) -> None:
    binds = _defaults()
    ports = {flag: _port(address) for flag, address in binds.items()}
    assert set(ports) == {"health_probe_bind_address", "metrics_bind_address", "webhook_bind_address"}
    # the README's out-of-cluster run binds the same defaults in the other make test group
    async with hostports.holding(ports.values()):
        await _security_basics(scenario, binds, ports)


async def _security_basics(scenario: Scenario, binds: dict[str, str], ports: dict[str, int]) -> None:
    c, ns, kube_cluster, tmp_path = scenario.client, scenario.namespace, scenario.kubeconfig, scenario.logs
    busy = [why for port in ports.values() if (why := _holder(port))]
    assert not busy, f"the default binds cannot be checked while other processes hold them: {busy}"
    objs = deploy_rbac.objects(namespace=ns, watch_namespaces=[ns], name=f"sec-{ns}")
    cluster_scoped = [o for o in objs if "namespace" not in o["metadata"]]
    storage = {
        "AWS_ACCESS_KEY_ID": "AKIA" + secrets.token_hex(8).upper(),
        "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(30),
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": STORAGE_SECRET},
        "stringData": storage,
    }
    await c.create(resources.SECRET, secret, ns)
    await identity.apply_objects(c, objs)
    token = await identity.token_for(c, ns, deploy_rbac.NAME)
    kubeconfig = identity.token_kubeconfig(kube_cluster, token, tmp_path / "operator.kubeconfig")
    log = tmp_path / "operator.log"
    names = ("plain", "delivered")
    try:
        async with webhook.paused(c):
            # the API server calls the process under test (its default webhook address) meanwhile
            await crd.install(c, webhook_url=f"https://{binds['webhook_bind_address']}{crd.WEBHOOK_PATH}")
            started = time.monotonic()
            proc = _start(kubeconfig, log, ns)
            try:

                async def ready() -> bool:
                    assert proc.proc.poll() is None, f"the operator exited: {proc.tail()}"
                    return await proc.ready()

                await wait.until(
                    ready, timeout=TIMEOUT, retry_on=(), what="the operator ready (probes, webhook)"
                )
                await wait.until(lambda: crd.converts(c), timeout=TIMEOUT, what="conversions through it")
                await c.create(ISVC, one_replica("plain", modelUri="s3://models/plain/1"), ns)
                storage_ext = {"secretName": STORAGE_SECRET, "endpoint": "http://minio.storage.svc:9000"}
                delivered = one_replica(
                    "delivered", modelUri="s3://models/delivered/1", extensions={"storage": storage_ext}
                )
                await c.create(ISVC, delivered, ns)
                for name in names:
                    await wait.for_condition(c, ISVC, ns, name, "Ready", "True", timeout=TIMEOUT)
                ready_s = time.monotonic() - started
                # (a) every listening socket of the process is on loopback, at the defaults
                sockets = listening(proc.proc.pid)
                logged = {
                    "health_probe_bind_address": proc.health_port,
                    "metrics_bind_address": proc.metrics_port,
                }
                # (b) TLS versions: the webhook, and the control accepting all of them
                hook_secret = await c.get(resources.SECRET, serve.SECRET[1], ns)
                pems = {k: base64.b64decode(v).decode() for k, v in hook_secret["data"].items()}
                hook_versions = await _tls_versions(ports["webhook_bind_address"], pems[keeper.CA_CRT])
                async with _permissive_server(
                    pems[keeper.TLS_CRT].encode(), pems[keeper.TLS_KEY].encode(), tmp_path
                ) as control_port:
                    control_versions = await _tls_versions(control_port, pems[keeper.CA_CRT])
                metrics = await proc.metrics()
            finally:
                code = await proc.stop()
        assert code == 0, f"the operator exited with {code}: {proc.tail()}"
        deployment = await c.get(resources.DEPLOYMENT, "delivered-predictor", ns)
        volumes = deployment["spec"]["template"]["spec"].get("volumes") or []
        assert {"secretName": STORAGE_SECRET} in [
            {k: v for k, v in (vol.get("secret") or {}).items() if k == "secretName"} for vol in volumes
        ], f"the storage Secret is not mounted: {volumes}"
        isvcs = (await c.list(api.RESOURCE, ns))["items"]
        deployments = (await c.list(resources.DEPLOYMENT, ns))["items"]
        events = (await c.list(resources.EVENT, ns))["items"]
    finally:
        await identity.delete_objects(c, cluster_scoped)

    # (a)
    print(f"\nsecurity: listening sockets of the operator (no bind flag): {sockets}")
    assert {proto for proto, _, _ in sockets} <= {"tcp"}, f"not TCP over IPv4 only: {sockets}"
    assert {address for _, address, _ in sockets} == {LOOPBACK}, f"not loopback only: {sockets}"
    assert sorted(port for _, _, port in sockets) == sorted(ports.values()), (sockets, binds)
    assert logged == {k: ports[k] for k in logged}, (
        f"its log's serving lines: {logged}, the defaults: {binds}"
    )
    # (b)
    print(f"security: TLS handshakes with the webhook {hook_versions}; with the control {control_versions}")
    accepted = {"TLSv1": "TLSv1", "TLSv1_1": "TLSv1.1", "TLSv1_2": "TLSv1.2", "TLSv1_3": "TLSv1.3"}
    assert control_versions == accepted, f"this client cannot speak every version: {control_versions}"
    for old in ("TLSv1", "TLSv1_1"):
        assert hook_versions[old].startswith("refused"), f"the webhook accepted {old}: {hook_versions}"
    for new in ("TLSv1_2", "TLSv1_3"):
        assert hook_versions[new] == accepted[new], f"the webhook refused {new}: {hook_versions}"
    # (c)
    made = requests_made(metrics)
    rules = deploy_rbac.declared_rules()
    uncovered = sorted({(v, r) for (v, r, _) in made if not rbac.covers(rules, v, r)})
    denied = {k: n for k, n in made.items() if k[2] in ("401", "403")}
    print(
        f"security: Ready under the generated RBAC {ready_s:.1f} s after the start; "
        f"{sum(made.values())} requests ({len(made)} kinds), denied {denied}, uncovered {uncovered}"
    )
    assert made, "no request counted on /metrics?"
    assert ("create", "secrets", "201") in made, "the webhook did not create its Secret as the ServiceAccount"
    assert not uncovered and not denied, (uncovered, denied)
    assert ready_s <= READY_WITHIN, f"Ready {ready_s:.1f} s after the start"
    # (d)
    needles = dict(_needles(token, pems, storage, kube_cluster))
    missed = [what for what, needle in needles.items() if what not in findings(f"<{needle}>", {what: needle})]
    assert not missed, f"the scanner misses {missed}"
    sample = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.x -----BEGIN EC PRIVATE KEY-----"
    assert len(findings(sample, {})) == len(PATTERNS), findings(sample, {})
    lines = proc.lines()
    debug = sum(1 for line in lines if line.get("level") == "debug")
    assert debug, "no debug line in the operator's log: the scan would miss what only debug shows"
    haystacks = {
        "the operator's log": log.read_text(),
        "its /metrics": metrics,
        **{f"Event {e['metadata']['name']}": json.dumps(e) for e in events},
        **{f"InferenceService {o['metadata']['name']}": json.dumps(o) for o in isvcs},
        **{f"Deployment {o['metadata']['name']}": json.dumps(o) for o in deployments},
    }
    leaks = {where: found for where, text in haystacks.items() if (found := findings(text, needles))}
    print(
        f"security: scanned {len(lines)} log lines ({debug} debug), {len(events)} Events, {len(isvcs)} "
        f"InferenceServices, {len(deployments)} Deployments and /metrics for {len(needles)} secret "
        f"strings and {len(PATTERNS)} patterns: {leaks or 'nothing found'}"
    )
    assert not leaks, f"secret material found: {leaks}"
    assert any((e.get("reportingController") or "").startswith("mlops-platform") for e in events), (
        "no Event of the operator among the scanned ones"
    )
    scenario.report(
        "11. Security basics",
        1,
        "none injected: binds, TLS floor, RBAC and leaks checked on one operator process",
        len(isvcs) + len(deployments) + len(events),
        f"listening {len(sockets)} sockets, all {LOOPBACK}, with no bind flag; webhook refused "
        f"TLS 1.0/1.1, accepted 1.2/1.3; {sum(made.values())} requests as the ServiceAccount, "
        f"0 denied, all covered by the generated rules; {len(needles)} secret strings + "
        f"{len(PATTERNS)} patterns absent from {len(lines)} log lines ({debug} debug), "
        f"{len(events)} Events, statuses, Deployments, /metrics",
        max_converge_s=ready_s,
    )


def _needles(
    token: str, webhook_pems: Mapping[str, str], storage: Mapping[str, str], admin_kubeconfig: Path
) -> Iterator[tuple[str, str]]:
    """Every secret string the scan looks for (what -> the exact string)."""
    yield "the ServiceAccount token", token
    for key, pem in webhook_pems.items():
        yield from _secret_needles(f"webhook Secret {key}", pem)
    for key, value in storage.items():
        yield from _secret_needles(f"storage Secret {key}", value)
    yield from _kubeconfig_needles(admin_kubeconfig)
