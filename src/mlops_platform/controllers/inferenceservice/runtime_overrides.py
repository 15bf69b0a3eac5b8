"""Overrides of the runtime table (:mod:`~.servers`): ``--runtime-config``, a ConfigMap's ``data``.

Contract:
- :func:`load_overrides` merges a ConfigMap's ``data`` (key ``runtimes.yaml``) over a table, and
  adds the new runtimes it defines (``basedOn`` an entry, or a full definition); it is pure and
  raises :class:`ServingRuntimeError` naming the offending key. A bad ConfigMap never yields a
  half-merged table.
- Every runtime it leaves is checked as a whole (:func:`_validate`): label-valid server, format
  names, pinned images, port names and numbers used once, quantities, placement, a drain shorter
  than the grace period, environment names, and only known placeholders in the templates.
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

import msgspec
import yaml
from msgspec import Meta

from mlops_platform.controllers.inferenceservice.servers import (
    METRICS_DIALECTS,
    MODEL_LAYOUTS,
    STARTUP_FAILURES,
    STARTUP_PERIOD,
    MetricsDialect,
    ModelLayout,
    Probe,
    ServingRuntime,
    ServingRuntimeTable,
    default_table,
)
from mlops_platform.runtime import quantity as quantity_

CONFIG_KEY = "runtimes.yaml"
_PORT_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,13}[a-z0-9])?$")  # IANA_SVC_NAME, 15 chars max
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
#: a runtime name: a DNS label (it becomes the ``mlops.platform/framework`` label value)
RUNTIME_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_RUNTIME_NAME = 63
#: a model format name, lowercase as KServe spells them (``onnx``, ``sklearn``, ``alibi-detect``)
_FORMAT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: a label value (``app.kubernetes.io/name`` carries the server software)
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class ServingRuntimeError(ValueError):
    """An invalid runtime override; the message names the key (``runtimes.yaml: triton.image``)."""


class _Struct(msgspec.Struct, rename="camel", forbid_unknown_fields=True, omit_defaults=True):
    pass


Positive = Annotated[int, Meta(ge=1)]
Image = Annotated[str, Meta(min_length=1, pattern=r"^\S+$")]
AbsolutePath = Annotated[str, Meta(pattern=r"^/")]


class _ProbeOverride(_Struct):
    path: AbsolutePath | None = None
    period_seconds: Positive | None = None
    timeout_seconds: Positive | None = None
    failure_threshold: Positive | None = None


class _Toleration(_Struct):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class _Override(_Struct):
    based_on: str | None = None
    server: str | None = None
    image: Image | None = None
    gpu_image: Image | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    ports: dict[str, int] | None = None
    readiness_probe: _ProbeOverride | None = None
    liveness_probe: _ProbeOverride | None = None
    startup_probe: _ProbeOverride | None = None
    run_as_user: Annotated[int, Meta(ge=0)] | None = None
    run_as_non_root: bool | None = None
    default_requests: dict[str, str | int] | None = None
    metrics_path: AbsolutePath | None = None
    model_dir: AbsolutePath | None = None
    target_cpu_utilization: Positive | None = None
    termination_grace_period_seconds: Annotated[int, Meta(ge=0)] | None = None
    drain_seconds: Annotated[int, Meta(ge=0)] | None = None
    progress_deadline_seconds: Positive | None = None
    formats: list[str] | None = None
    metrics_dialect: MetricsDialect | None = None
    model_layout: ModelLayout | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[_Toleration] | None = None


#: what a runtime defined from scratch (no ``basedOn``) must say, by key
_REQUIRED = ("image", "args or command", "readinessProbe.path", "livenessProbe.path", "metricsDialect")


def load_overrides(data: Mapping[str, Any], base: ServingRuntimeTable | None = None) -> ServingRuntimeTable:
    """``base`` (default: :func:`default_table`) with a ConfigMap's ``data`` merged over it.

    ``data[runtimes.yaml]`` maps a runtime name to fields (camelCase, as in a Kubernetes
    manifest). For an entry of ``base`` they override it: probes merge field by field, maps (env,
    ports) key by key, lists (command, args, formats) are replaced. A new name (a DNS label) adds a
    runtime: ``basedOn: <entry>`` inherits everything of that entry (as this document leaves it)
    and merges its fields the same way; without ``basedOn`` it is a full definition, which must
    give :data:`_REQUIRED`. Raises :class:`ServingRuntimeError` naming the bad key.
    """
    table = dict(base if base is not None else default_table())
    entries = _entries(data)
    existing = frozenset(table)
    resolving: list[str] = []
    done: set[str] = set()

    def resolve(name: str) -> ServingRuntime:
        """The runtime ``name`` as this document leaves it (its base resolved first)."""
        if name in done or name not in entries:
            return table[name]
        where = f"{CONFIG_KEY}: {name}"
        if name in resolving:
            cycle = " -> ".join([*resolving[resolving.index(name) :], name])
            raise ServingRuntimeError(f"{where}.basedOn: a cycle ({cycle})")
        override, raw = entries[name]
        resolving.append(name)
        if name in existing:
            if override.based_on is not None:
                raise ServingRuntimeError(
                    f"{where}.basedOn: {name} already exists (its fields merge over it); basedOn is "
                    "for a new runtime"
                )
            start = table[name]
        elif override.based_on is not None:
            if override.based_on not in existing and override.based_on not in entries:
                known = ", ".join(sorted((existing | entries.keys()) - {name}))
                raise ServingRuntimeError(
                    f"{where}.basedOn: no runtime {override.based_on!r} (known: {known})"
                )
            start = resolve(override.based_on)
        else:
            start = _blank(name, override, raw, where)
        table[name] = _validate(_merge(start, override), where)
        resolving.pop()
        done.add(name)
        return table[name]

    for name in entries:
        resolve(name)
    return MappingProxyType(table)


def _entries(data: Mapping[str, Any]) -> dict[str, tuple[_Override, Any]]:
    """The runtimes ``data[runtimes.yaml]`` defines, by name: each one's fields decoded and its
    raw map (none when the key is absent or the document empty)."""
    for key in data:
        if key != CONFIG_KEY:
            raise ServingRuntimeError(f"{key}: unknown key (expected {CONFIG_KEY})")
    text = data.get(CONFIG_KEY)
    if text is None:
        return {}
    if not isinstance(text, str):
        raise ServingRuntimeError(f"{CONFIG_KEY}: expected YAML text, got {type(text).__name__}")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ServingRuntimeError(f"{CONFIG_KEY}: invalid YAML: {e}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ServingRuntimeError(f"{CONFIG_KEY}: expected a map of runtime name to its fields")
    entries: dict[str, tuple[_Override, Any]] = {}
    for name, raw in doc.items():
        where = f"{CONFIG_KEY}: {name}"
        if not isinstance(name, str) or len(name) > MAX_RUNTIME_NAME or not RUNTIME_NAME.match(name):
            raise ServingRuntimeError(
                f"{where}: not a valid runtime name (a DNS label: lowercase letters, digits and '-', "
                f"at most {MAX_RUNTIME_NAME} characters)"
            )
        _check_maps(raw, where)
        try:
            override = msgspec.convert(raw if raw is not None else {}, _Override, strict=True)
        except msgspec.ValidationError as e:
            raise ServingRuntimeError(_explain(e, where)) from None
        entries[name] = (override, raw)
    return entries


def _blank(name: str, o: _Override, raw: Any, where: str) -> ServingRuntime:
    """The start of a runtime defined from scratch: the required keys checked, the rest defaulted
    (the startup probe: the liveness path every 2 s with 300 failures, as the built-in runtimes)."""
    for key in _REQUIRED:
        if not _given(raw, key):
            raise ServingRuntimeError(
                f"{where}.{key.replace(' or ', '/')}: required for a new runtime (or say basedOn: <runtime>)"
            )
    assert o.liveness_probe is not None and o.liveness_probe.path is not None  # required above
    live = o.liveness_probe.path
    return ServingRuntime(
        server=name,
        image="",
        args=(),
        ports=MappingProxyType({}),
        readiness_probe=Probe("/"),
        liveness_probe=Probe(live),
        startup_probe=Probe(live, period_seconds=STARTUP_PERIOD, failure_threshold=STARTUP_FAILURES),
    )


def _given(raw: Any, key: str) -> bool:
    """Whether ``raw`` gives ``key`` (``livenessProbe.path``: a nested one; ``args or command``: either)."""
    if " or " in key:
        return any(_given(raw, k) for k in key.split(" or "))
    value = raw
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value is not None and value != [] and value != ""


def _explain(e: msgspec.ValidationError, where: str) -> str:
    """``Expected `int` >= 1 - at `$.startupProbe.failureThreshold``` -> the key first."""
    message, sep, path = str(e).rpartition(" - at `$")
    if not sep:
        message, path = str(e), ""
    path = where + path.rstrip("`")
    unknown = re.fullmatch(r"Object contains unknown field `(.+)`", message)
    if unknown:
        return f"{path}.{unknown.group(1)}: unknown field"
    if path.endswith(".metricsDialect"):
        message += f" (expected one of {', '.join(METRICS_DIALECTS)})"
    if path.endswith(".modelLayout"):
        message += f" (expected one of {', '.join(MODEL_LAYOUTS)})"
    return f"{path}: {message}"


_MAP_VALUES: dict[str, tuple[type, ...]] = {
    "env": (str,),
    "ports": (int,),
    "defaultRequests": (str, int),
    "nodeSelector": (str,),
}


def _check_maps(raw: Any, where: str) -> None:
    """Type-check map values here: msgspec's errors do not name the map key."""
    for field, types in _MAP_VALUES.items():
        value = raw.get(field) if isinstance(raw, dict) else None
        for k, v in value.items() if isinstance(value, dict) else ():
            if not isinstance(v, types) or isinstance(v, bool):
                want = " or ".join(t.__name__ for t in types)
                raise ServingRuntimeError(f"{where}.{field}.{k}: expected {want}, got {v!r} (quote strings)")


_NESTED = frozenset(
    {
        "based_on",
        "env",
        "ports",
        "default_requests",
        "readiness_probe",
        "liveness_probe",
        "startup_probe",
        "node_selector",
        "tolerations",
    }
)


def _merge(spec: ServingRuntime, o: _Override) -> ServingRuntime:
    changes: dict[str, Any] = {
        f.name: getattr(o, f.name)
        for f in msgspec.structs.fields(o)
        if getattr(o, f.name) is not None and f.name not in _NESTED
    }
    for name in ("command", "args", "formats"):
        if name in changes:
            changes[name] = tuple(changes[name])
    if o.env is not None:
        changes["env"] = MappingProxyType({**spec.env, **o.env})
    if o.ports is not None:
        changes["ports"] = MappingProxyType({**spec.ports, **o.ports})
    if o.node_selector is not None:
        changes["node_selector"] = MappingProxyType({**spec.node_selector, **o.node_selector})
    if o.tolerations is not None:
        changes["tolerations"] = tuple(MappingProxyType(msgspec.to_builtins(t)) for t in o.tolerations)
    if o.default_requests is not None:
        changes["default_requests"] = MappingProxyType({k: str(v) for k, v in o.default_requests.items()})
    for name in ("readiness_probe", "liveness_probe", "startup_probe"):
        probe_override: _ProbeOverride | None = getattr(o, name)
        if probe_override is not None:
            fields = {k: v for k, v in msgspec.structs.asdict(probe_override).items() if v is not None}
            changes[name] = dataclasses.replace(getattr(spec, name), **fields)
    return dataclasses.replace(spec, **changes)


def _validate(spec: ServingRuntime, where: str) -> ServingRuntime:
    if not _LABEL_VALUE.match(spec.server):
        raise ServingRuntimeError(f"{where}.server: {spec.server!r} is not a valid label value")
    for i, model_format in enumerate(spec.formats):
        if not _FORMAT_NAME.match(model_format):
            raise ServingRuntimeError(
                f"{where}.formats[{i}]: {model_format!r} is not a format name (lowercase, as KServe's: onnx)"
            )
        if model_format in spec.formats[:i]:
            raise ServingRuntimeError(f"{where}.formats[{i}]: {model_format!r} is listed twice")
    for field, image in (("image", spec.image), ("gpuImage", spec.gpu_image)):
        if image is not None and not _pinned(image):
            raise ServingRuntimeError(
                f"{where}.{field}: {image!r} is not pinned (use a version tag or @sha256:)"
            )
    for name, number in spec.ports.items():
        if not _PORT_NAME.match(name) or name == "http":
            raise ServingRuntimeError(
                f"{where}.ports.{name}: not a valid port name (IANA service name, not http)"
            )
        if not 1 <= number <= 65535:
            raise ServingRuntimeError(f"{where}.ports.{name}: {number} is not a port number (1-65535)")
        users = [n for n, p in {**spec.ports, **spec.internal_ports}.items() if p == number]
        if len(users) > 1:
            raise ServingRuntimeError(
                f"{where}.ports.{name}: port {number} is used twice ({', '.join(users)})"
            )
    for name, quantity in spec.default_requests.items():
        if not quantity_.is_quantity(quantity):
            raise ServingRuntimeError(f"{where}.defaultRequests.{name}: {quantity!r} is not a quantity")
    _validate_placement(spec, where)
    if spec.drain_seconds and spec.drain_seconds >= spec.termination_grace_period_seconds:
        raise ServingRuntimeError(
            f"{where}.drainSeconds: {spec.drain_seconds} leaves the server no time to stop within "
            f"terminationGracePeriodSeconds {spec.termination_grace_period_seconds}"
        )
    for name in spec.env:
        if not _ENV_NAME.match(name):
            raise ServingRuntimeError(f"{where}.env.{name}: not a valid environment variable name")
    known = spec.placeholders(8080, "model")
    templates = [(f"command[{i}]", t) for i, t in enumerate(spec.command)]
    templates += [(f"args[{i}]", t) for i, t in enumerate(spec.args)]
    templates += [
        ("readinessProbe.path", spec.readiness_probe.path),
        ("livenessProbe.path", spec.liveness_probe.path),
        ("startupProbe.path", spec.startup_probe.path),
    ]
    for field, template in [*templates, *((f"env.{k}", v) for k, v in spec.env.items())]:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
        except ValueError as e:
            raise ServingRuntimeError(f"{where}.{field}: {e}") from None
        unknown = [f for f in fields if f not in known]
        if unknown:
            choices = ", ".join("{" + k + "}" for k in sorted(known))
            raise ServingRuntimeError(
                f"{where}.{field}: unknown placeholder {{{unknown[0]}}} (known: {choices})"
            )
    return spec


def _validate_placement(spec: ServingRuntime, where: str) -> None:
    """``nodeSelector`` values are label values; a toleration without a key tolerates every taint
    (``operator: Exists``) and ``Exists`` takes no value, as the API server would say of the pods."""
    for key, value in spec.node_selector.items():
        if value and not _LABEL_VALUE.match(value):
            raise ServingRuntimeError(f"{where}.nodeSelector.{key}: {value!r} is not a valid label value")
    for i, t in enumerate(spec.tolerations):
        operator = t.get("operator", "Equal")
        if operator == "Exists" and t.get("value"):
            raise ServingRuntimeError(
                f"{where}.tolerations[{i}].value: must be empty when operator is Exists"
            )
        if not t.get("key") and operator != "Exists":
            raise ServingRuntimeError(f"{where}.tolerations[{i}].operator: must be Exists when key is empty")


def _pinned(image: str) -> bool:
    if "@sha256:" in image:
        return True
    name, _, tag = image.rpartition(":")
    return bool(name) and "/" not in tag and tag not in ("", "latest")
