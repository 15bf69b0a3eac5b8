"""Option decorators and flag parsers that several commands share."""

from __future__ import annotations

import dataclasses
import errno
import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from mlops_platform import promclient
    from mlops_platform.runtime.transport.kubeconfig import KubeconfigError

F = TypeVar("F", bound=Callable[..., Any])
D = TypeVar("D", bound="DataclassInstance")

#: where ``--kubeconfig`` is looked for by default, as the help of the commands says it
KUBECONFIG_DEFAULT = "default: $KUBECONFIG, then the in-cluster service account, then ~/.kube/config"

#: ``-n``: the namespace of the object a command acts on (``why``, ``infer``)
namespace_option = click.option(
    "-n", "--namespace", help="default: the kubeconfig context's namespace, else default"
)


def stack(*decorators: Callable[[Any], Any]) -> Callable[[F], F]:
    """The option decorators as one; the options list in the order given."""

    def apply(f: F) -> F:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


def kubeconfig_options(help: str) -> Callable[[F], F]:
    """``--kubeconfig`` (``help``: where it is looked for without it) and ``--context``; a kubeconfig
    the command cannot use (``KubeconfigError``, wherever the command loads it) is a usage error
    naming ``--kubeconfig``: ``Error: --kubeconfig PATH: REASON``, exit code 2."""
    options = stack(
        click.option("--kubeconfig", type=click.Path(dir_okay=False), help=help),
        click.option("--context", help="kubeconfig context (default: current)"),
    )

    def apply(f: F) -> F:
        @functools.wraps(f)
        def command(*args: Any, **kwargs: Any) -> Any:
            from mlops_platform.runtime.transport import kubeconfig as rkubeconfig

            try:
                return f(*args, **kwargs)
            except rkubeconfig.KubeconfigError as e:
                raise click.UsageError(kubeconfig_message(kwargs.get("kubeconfig"), e)) from None

        return options(cast("F", command))

    return apply


def kubeconfig_message(flag: str | None, error: KubeconfigError) -> str:
    """What is wrong with the kubeconfig, naming ``--kubeconfig`` (``flag``: its value, if given)."""
    if flag:
        return f"--kubeconfig {flag}: {error.reason}"
    return f"kubeconfig {error.source} (no --kubeconfig given): {error.reason}"


def labels_option(flag: str, dest: str, help: str) -> Callable[[F], F]:
    """A repeatable ``KEY=VALUE`` option collected into a dict (bad items name the option)."""
    return click.option(
        flag,
        dest,
        multiple=True,
        callback=lambda ctx, param, value: parse_labels(param, value),
        metavar="KEY=VALUE",
        help=f"{help}; repeatable",
    )


def parse_labels(param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param=param)
        out[key] = value
    return out


def parse_cidrs(param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    import ipaddress

    try:
        return tuple(str(ipaddress.ip_network(v, strict=False)) for v in values)
    except ValueError as e:
        raise click.BadParameter(str(e), param=param) from None


#: a host name (RFC 1123: dot-separated labels of letters, digits and inner hyphens)
_LABEL = r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


def parse_address(value: str) -> tuple[str, int] | None:
    """``HOST:PORT`` as (host, port): no host is 127.0.0.1, ``[ADDRESS]`` an IPv6 one, the port in
    0-65535 (0: the kernel picks); ``0`` or nothing: None (not served). ValueError saying what is
    wrong else."""
    if value in ("0", ""):
        return None
    host, sep, port = value.rpartition(":")
    if not sep:
        raise ValueError("not HOST:PORT")
    if not port:
        raise ValueError("no port")
    if not (port.isascii() and port.isdigit()):
        raise ValueError(f"port {port!r} is not a number")
    if int(port) > 65535:
        raise ValueError(f"port {int(port)} is not in 0-65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not _is_ip(host, version=6):
            raise ValueError(f"[{host}] is not an IPv6 address")
    elif host and not _is_ip(host) and not _HOST_NAME.match(host):
        raise ValueError(f"host {host!r} is neither an IP address nor a host name")
    return (host or "127.0.0.1", int(port))


def _is_ip(host: str, version: int | None = None) -> bool:
    import ipaddress

    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return version is None or address.version == version


def address_option(flag: str, *, default: str, off: str, help: str) -> Callable[[F], F]:
    """A ``HOST:PORT`` option (``off``: the value that serves nothing), checked as it is parsed: a
    malformed address, or a host name that does not resolve, is a usage error naming ``flag``."""

    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        if value == off:
            return value
        hint = f"expected HOST:PORT, or {off!r} to serve nothing"
        try:
            address = parse_address(value)
        except ValueError as e:
            raise click.BadParameter(f"{value!r}: {e}; {hint}", ctx=ctx, param=param) from None
        if address is None:  # "0" or nothing: off where "0" means off
            if off == "0":
                return value
            raise click.BadParameter(f"{value!r}: {hint}", ctx=ctx, param=param)
        host = address[0]
        if not _is_ip(host):
            import socket

            try:
                socket.getaddrinfo(host, address[1], type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            except (OSError, UnicodeError) as e:  # socket.gaierror is an OSError
                reason = getattr(e, "strerror", None) or e
                raise click.BadParameter(
                    f"{value!r}: host {host!r}: {reason}", ctx=ctx, param=param
                ) from None
        return value

    return click.option(flag, default=default, callback=check, help=help)


#: what binding a server's address raises when the address is taken, not one of this host's, or
#: not the process's to bind (a port below 1024 without CAP_NET_BIND_SERVICE)
CANNOT_LISTEN = (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES)


def cannot_listen(error: OSError, **flags: str) -> click.ClickException:
    """``error`` (a server could not listen) as the command's error, naming the address ``flags``
    (``health_probe_bind_address="..."``) it may come from; exit code 1."""
    named = ", ".join(f"--{flag.replace('_', '-')} {value}" for flag, value in flags.items())
    return click.ClickException(f"{named}: cannot listen: {error.strerror or error}")


def take(cls: type[D], flags: dict[str, Any]) -> D:
    """The flags named like the dataclass ``cls``'s fields, as a ``cls``; taken out of ``flags``."""
    return cls(**{field.name: flags.pop(field.name) for field in dataclasses.fields(cls)})


def prometheus_options(f: F) -> F:
    """The ``--prometheus*`` flags of the operator's Prometheus queries (the canary analysis, on
    ``run``), into ``promclient.Options`` (:func:`take`);
    flags that do not go together are a usage error naming them (:func:`prometheus_endpoint`)."""
    from mlops_platform import promapi

    return stack(
        click.option(
            "--prometheus",
            default=str(promapi.DEFAULT),
            show_default=True,
            metavar="NAMESPACE/SERVICE:PORT",
            help="the Prometheus Service the canary analysis asks, through the API server's service "
            "proxy (works from outside the cluster, with the operator's own credentials)",
        ),
        click.option(
            "--prometheus-url",
            metavar="URL",
            help="ask Prometheus at this http(s) URL instead, on connections of its own (an operator in "
            "the cluster: https://prometheus-operated.monitoring.svc:9090)",
        ),
        click.option(
            "--prometheus-ca-file",
            type=click.Path(exists=True, dir_okay=False),
            help="CA bundle verifying an https --prometheus-url (default: the system's)",
        ),
        click.option(
            "--prometheus-insecure-skip-tls-verify",
            is_flag=True,
            help="do not verify an https --prometheus-url's certificate",
        ),
        click.option(
            "--prometheus-bearer-token-file",
            type=click.Path(dir_okay=False),
            help="bearer token for --prometheus-url, re-read on a 401 (a ServiceAccount token file)",
        ),
        click.option(
            "--prometheus-timeout",
            type=click.FloatRange(min=0, min_open=True),
            default=5.0,
            show_default=True,
            help="seconds a query may take in all, retries included",
        ),
        click.option(
            "--prometheus-retries",
            type=click.IntRange(0, 10),
            default=2,
            show_default=True,
            help="retries of a query that got no answer (connection, 5xx, 429)",
        ),
    )(f)


def prometheus_endpoint(flags: promclient.Options) -> promclient.Endpoint:
    """Where ``flags`` say Prometheus is; a usage error naming the flag else."""
    try:
        return flags.endpoint()
    except ValueError as e:
        raise click.UsageError(str(e)) from None
