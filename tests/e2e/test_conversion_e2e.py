"""The conversion webhook called by the real API server over verified TLS: an object written in one
version is read in every other with nothing lost, mixed-version lists, and children identical
whichever version an object was created in."""

from __future__ import annotations

import asyncio
import base64
import copy
import re
import socket
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

from mlops_platform.api import conversion, crd
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import isvc, plugin, probes, wait, webhook

JSON = dict[str, Any]
ALPHA = isvc.RESOURCE
BETA = rclient.Resource(crd.RESOURCE.group, "v1beta1", crd.RESOURCE.plural, crd.RESOURCE.kind)
V1 = crd.RESOURCE
TIMEOUT = 90


def alpha(name: str) -> JSON:
    return isvc.manifest(
        name,
        modelUri="gs://models/bert/7",
        framework="torchserve",
        minReplicas=2,
        maxReplicas=4,
        resources={"cpuRequest": "250m", "memoryLimit": "1Gi"},
        traffic={"canaryVersion": "8", "canaryPercent": 0},
        extensions={"monitoring": {"alerts": {"errorRatio": 0.02}}, "team": "search"},
    )


def spec_of(obj: JSON) -> JSON:
    return copy.deepcopy(obj["spec"])


async def test_create_in_v1alpha1_read_in_every_version_update_in_v1_nothing_lost(
    admin_client: rclient.Client, namespace: str, kubectl: plugin.Kubectl
) -> None:
    c = admin_client
    created = await c.create(ALPHA, alpha("bert"), namespace)
    beta = await c.get(BETA, "bert", namespace)
    hub = await c.get(V1, "bert", namespace)
    assert beta["apiVersion"] == "mlops.platform/v1beta1" and hub["apiVersion"] == "mlops.platform/v1"
    assert hub["spec"]["predictor"]["model"] == {"uri": "gs://models/bert/7"}
    assert hub["spec"]["predictor"]["autoscaling"] == {"minReplicas": 2, "maxReplicas": 4}
    assert hub["spec"]["canary"] == {"model": {"uri": "gs://models/bert/8"}, "trafficPercent": 0}
    assert hub["spec"]["monitoring"] == {"alerts": {"errorRatio": 0.02}}
    assert beta["spec"]["extensions"]["monitoring"] == {"alerts": {"errorRatio": 0.02}}
    # kubectl, as a user would: the versioned resource name
    rc, out, err = await kubectl(
        "get", "inferenceservices.v1beta1.mlops.platform", "bert", "-n", namespace, "-o", "json"
    )
    assert rc == 0, err
    assert '"apiVersion": "mlops.platform/v1beta1"' in out
    # update in v1 with a setting v1alpha1 cannot say; read in v1alpha1: the old fields unchanged
    hub["spec"]["predictor"]["autoscaling"]["targetUtilization"] = {"cpu": 70, "memory": 80}
    hub["spec"]["predictor"]["model"]["format"] = "pytorch"
    await c.replace(V1, hub)
    old = await c.get(ALPHA, "bert", namespace)
    assert spec_of(old) == spec_of(created)
    assert conversion.ANNOTATION in old["metadata"]["annotations"]
    # an edit in v1alpha1 keeps what only v1 says
    old["spec"]["maxReplicas"] = 6
    await c.replace(ALPHA, old)
    again = await c.get(V1, "bert", namespace)
    assert again["spec"]["predictor"]["autoscaling"] == {
        "minReplicas": 2, "maxReplicas": 6, "targetUtilization": {"cpu": 70, "memory": 80},
    }  # fmt: skip
    assert again["spec"]["predictor"]["model"] == {"uri": "gs://models/bert/7", "format": "pytorch"}


async def test_a_list_of_objects_written_in_every_version(
    admin_client: rclient.Client, namespace: str
) -> None:
    c = admin_client
    first = await c.create(ALPHA, alpha("one"), namespace)
    v1_obj = conversion.convert(first, "mlops.platform/v1")
    for name, version in (("two", "mlops.platform/v1beta1"), ("three", "mlops.platform/v1")):
        body = conversion.convert(v1_obj, version)
        body["metadata"] = {"name": name}
        await c.create(BETA if "beta" in version else V1, body, namespace)
    for resource in (ALPHA, BETA, V1):
        listed = await c.list(resource, namespace)
        items = sorted(listed["items"], key=lambda o: o["metadata"]["name"])
        assert [o["metadata"]["name"] for o in items] == ["one", "three", "two"]
        assert {o["apiVersion"] for o in items} == {f"mlops.platform/{resource.version}"}
        specs = [o["spec"] for o in items]
        assert specs[0] == specs[1] == specs[2]  # the same service, read in one version


async def _children(c: rclient.Client, namespace: str, name: str) -> JSON:
    out: JSON = {}
    for kind, resource in (("deployment", resources.DEPLOYMENT), ("service", resources.SERVICE)):
        obj = await wait.until(
            _child(c, resource, namespace, f"{name}-predictor"),
            timeout=TIMEOUT,
            what=f"{kind} {name}-predictor",
        )
        out[kind] = _comparable(obj, name)
    return out


def _child(
    c: rclient.Client, resource: rclient.Resource, namespace: str, name: str
) -> Callable[[], Awaitable[JSON | None]]:
    return lambda: probes.get_or_none(c, resource, namespace, name)


def _comparable(obj: JSON | None, name: str) -> JSON:
    """The object as the operator built it, with the InferenceService's name and uid taken out."""
    assert obj is not None
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out["metadata"]
    volatile = (
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "managedFields",
        "ownerReferences",
    )
    for key in volatile:
        meta.pop(key, None)
    for allocated in ("clusterIP", "clusterIPs"):  # the API server's choice, not the operator's
        out.get("spec", {}).pop(allocated, None)
    renamed: JSON = _renamed(out, name)
    return renamed


#: derived from the object's name (a hash of namespace/name), so they differ by name, not by version;
#: and the Deployment controller's revision, set whenever it gets to it
NAME_DERIVED = {
    "mlops.platform/shard-bucket",
    "mlops.platform/desired-hash",
    "deployment.kubernetes.io/revision",
}


def _renamed(value: Any, name: str) -> Any:
    if isinstance(value, dict):
        return {_renamed(k, name): _renamed(v, name) for k, v in value.items() if k not in NAME_DERIVED}
    if isinstance(value, list):
        return [_renamed(v, name) for v in value]
    return value.replace(name, "NAME") if isinstance(value, str) else value


async def test_children_are_identical_whichever_version_an_object_was_created_in(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str
) -> None:
    c = admin_client
    source = alpha("src")
    hub = conversion.convert(source, "mlops.platform/v1")
    beta = conversion.convert(source, "mlops.platform/v1beta1")
    bodies = {
        "from-alpha": (ALPHA, source),
        "from-beta": (BETA, beta),
        "from-v1": (V1, hub),
    }
    for name, (resource, body) in bodies.items():
        body = copy.deepcopy(body)
        body["metadata"] = {"name": name}
        await c.create(resource, body, namespace)
    children = [await _children(c, namespace, name) for name in bodies]
    for kind in ("deployment", "service"):
        assert children[0][kind] == children[1][kind]
        assert children[0][kind] == children[2][kind]
    for name in bodies:
        await wait.for_condition(c, V1, namespace, name, "Reconciled", "True", timeout=TIMEOUT)


async def _webhook_calls(c: rclient.Client, from_version: str, to_version: str) -> float:
    """The conversions of InferenceServices the API server asked the webhook for and got (its own
    ``apiserver_crd_conversion_webhook_duration_seconds``, succeeded)."""
    labels = (
        f'crd_name="{crd.CRD_NAME}",from_version="{from_version}",succeeded="true",to_version="{to_version}"'
    )
    sample = re.escape(f"apiserver_crd_conversion_webhook_duration_seconds_count{{{labels}}}")
    found = re.search(rf"^{sample} (\S+)$", await c.request_text("/metrics"), re.M)
    return float(found.group(1)) if found else 0.0


def _verified_handshake(host: str, port: int, ca_bundle: bytes) -> None:
    """A TLS handshake with the server at ``host:port`` that verifies its certificate chain against
    ``ca_bundle`` and its name against ``host`` (raises ``ssl.SSLError`` otherwise)."""
    context = ssl.create_default_context(cadata=ca_bundle.decode())
    with (
        socket.create_connection((host, port), timeout=10) as sock,
        context.wrap_socket(sock, server_hostname=host),
    ):
        pass


async def test_the_api_server_calls_the_webhook_over_verified_tls(
    admin_client: rclient.Client, namespace: str
) -> None:
    """The CRD sends conversions to the session's webhook over https, trusting exactly the CA the
    webhook keeps in its Secret, which verifies the certificate it serves for the address called;
    then a read that only the webhook can answer (an object stored as v1, read as v1alpha1) is
    answered, converted, and the API server counts the call it made to the webhook."""
    c = admin_client
    live = await c.get(resources.CRD, crd.CRD_NAME)
    conv = live["spec"]["conversion"]
    assert conv["strategy"] == "Webhook"
    assert live["status"]["storedVersions"][-1] == "v1"
    config = conv["webhook"]["clientConfig"]
    url = urllib.parse.urlsplit(config["url"])
    assert config["url"] == webhook.url() and url.scheme == "https", config["url"]
    bundle = base64.b64decode(config["caBundle"])
    assert bundle == await webhook.stored_bundle(c), "the CRD trusts another CA than the webhook's"
    assert url.hostname and url.port
    await asyncio.to_thread(_verified_handshake, url.hostname, url.port, bundle)

    hub = conversion.convert(alpha("tls"), "mlops.platform/v1")
    await c.create(V1, hub, namespace)
    before = await _webhook_calls(c, "v1", "v1alpha1")
    read = await c.get(ALPHA, "tls", namespace)  # stored as v1: converted by the webhook
    after = await _webhook_calls(c, "v1", "v1alpha1")
    assert read["apiVersion"] == "mlops.platform/v1alpha1"
    assert read["spec"]["modelUri"] == "gs://models/bert/7", read["spec"]
    assert after > before, f"the API server counted no call to the webhook ({before} -> {after})"
