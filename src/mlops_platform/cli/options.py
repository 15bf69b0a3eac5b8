"""Option decorators and flag parsers that several commands share."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from mlops_platform.runtime.transport.kubeconfig import KubeconfigError

F = TypeVar("F", bound=Callable[..., Any])
D = TypeVar("D", bound="DataclassInstance")

#: where ``--kubeconfig`` is looked for by default, as the help of the commands says it
KUBECONFIG_OR_IN_CLUSTER = "default: $KUBECONFIG, then in-cluster"
KUBECONFIG_HOME_OR_IN_CLUSTER = "default: $KUBECONFIG, ~/.kube/config, in-cluster"

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


def parse_address(value: str) -> tuple[str, int] | None:
    if value in ("0", ""):
        return None
    host, _, port = value.rpartition(":")
    return (host or "127.0.0.1", int(port))


def take(cls: type[D], flags: dict[str, Any]) -> D:
    """The flags named like the dataclass ``cls``'s fields, as a ``cls``; taken out of ``flags``."""
    return cls(**{field.name: flags.pop(field.name) for field in dataclasses.fields(cls)})
