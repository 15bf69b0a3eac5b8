"""A kubeconfig loaded and its context chosen, as :meth:`.rawclient.RawClient.from_kubeconfig` does.

Contract: every way a kubeconfig cannot be used (no such file, not readable, not YAML, not a
kubeconfig, no current context, no such context, a context naming a cluster or user the file does not
define, missing TLS files) raises one :class:`KubeconfigError` saying where (:attr:`~KubeconfigError.source`)
and why (:attr:`~KubeconfigError.reason`), never lightkube's errors or a ``KeyError``: the command
line turns it into a usage error naming ``--kubeconfig``. Without a path: ``$KUBECONFIG``, else the
in-cluster service account, else ``~/.kube/config`` (controller-runtime's order: a ``$KUBECONFIG``
set in a pod wins over its service account).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import yaml
from lightkube.config import kubeconfig
from lightkube.core.exceptions import ConfigError

#: one context of a kubeconfig, its cluster and user (``fname``: the file it was read from, if any)
SingleConfig = kubeconfig.SingleConfig

#: where the kubeconfig is read without a path, without ``$KUBECONFIG`` and outside a cluster
DEFAULT_PATH = kubeconfig.DEFAULT_KUBECONFIG


class KubeconfigError(Exception):
    """A kubeconfig that cannot be used: ``source`` (its path, or where it was looked for) and ``reason``."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"kubeconfig {source}: {reason}")
        self.source = source
        self.reason = reason


def load(path: str | os.PathLike[str] | None, context: str | None = None) -> SingleConfig:
    """The context ``context`` (default: the current one) of the kubeconfig at ``path`` (default:
    ``$KUBECONFIG``, the in-cluster service account, ``~/.kube/config``); :class:`KubeconfigError`
    else."""
    if path is not None:
        return select(read(Path(path), str(path)), context, str(path))
    env = os.environ.get("KUBECONFIG")
    if env:
        return select(read(Path(env), f"$KUBECONFIG {env}"), context, f"$KUBECONFIG {env}")
    try:
        config = kubeconfig.KubeConfig.from_service_account()
    except ConfigError:  # no service account token: not in a cluster
        return select(read(Path(DEFAULT_PATH), DEFAULT_PATH), context, DEFAULT_PATH)
    except KeyError as e:  # a token but not the service's environment variables
        raise KubeconfigError("in-cluster service account", f"${e.args[0]} is not set") from None
    except OSError as e:
        raise KubeconfigError("in-cluster service account", f"cannot read it: {e}") from None
    return select(config, context, "in-cluster service account")


def read(path: Path, source: str) -> kubeconfig.KubeConfig:
    """The kubeconfig file at ``path`` (``source``: how errors name it)."""
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except OSError as e:
        raise KubeconfigError(source, f"cannot read it: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise KubeconfigError(source, "not YAML: not UTF-8 text") from None
    try:
        conf = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise KubeconfigError(source, f"not YAML: {getattr(e, 'problem', None) or e}{where}") from None
    return from_dict(conf, source, fname=path.expanduser())


def from_dict(conf: Any, source: str, *, fname: Path | None = None) -> kubeconfig.KubeConfig:
    """A kubeconfig from its structure (``fname``: where relative file names in it start)."""
    if not isinstance(conf, Mapping):
        what = "empty" if conf is None else f"a YAML {type(conf).__name__}, not a mapping"
        raise KubeconfigError(source, f"not a kubeconfig: {what}")
    for key in ("clusters", "contexts"):
        if not isinstance(conf.get(key), list):
            raise KubeconfigError(source, f"not a kubeconfig: no list of {key}")
    try:
        return kubeconfig.KubeConfig.from_dict(dict(conf), fname=fname)
    except KeyError as e:
        raise KubeconfigError(source, f"not a kubeconfig: an entry without {e.args[0]!r}") from None
    except (TypeError, AttributeError, msgspec.ValidationError) as e:
        raise KubeconfigError(source, f"not a kubeconfig: {e}") from None


def select(config: kubeconfig.KubeConfig, context: str | None, source: str) -> SingleConfig:
    """The context ``context`` (default: the current one) of ``config``, its cluster and user."""
    known = ", ".join(sorted(config.contexts)) or "none"
    name = context or config.current_context
    if name is None:
        raise KubeconfigError(source, f"no current-context, and no context asked for (its contexts: {known})")
    ctx = config.contexts.get(name)
    if ctx is None:
        which = "no context" if context else "its current-context is"
        raise KubeconfigError(source, f"{which} {name!r} (its contexts: {known})")
    if ctx.cluster not in config.clusters:
        raise KubeconfigError(
            source, f"context {name!r} names cluster {ctx.cluster!r}, which it does not define"
        )
    if ctx.user is None:
        raise KubeconfigError(source, f"context {name!r} names no user")
    if ctx.user not in config.users:
        raise KubeconfigError(source, f"context {name!r} names user {ctx.user!r}, which it does not define")
    try:
        single = config.get(context_name=name)
    except ConfigError as e:
        raise KubeconfigError(source, str(e)) from None
    assert single is not None  # a name was given
    for field, file in (
        ("certificate-authority", single.cluster.certificate_auth),
        ("client-certificate", single.user.client_cert if single.user else None),
        ("client-key", single.user.client_key if single.user else None),
    ):
        try:
            found = not file or Path(single.abs_file(file)).is_file()
        except ConfigError as e:  # a relative file name in a kubeconfig read from no file
            raise KubeconfigError(source, f"context {name!r}: {field}: {e}") from None
        if not found:
            raise KubeconfigError(source, f"context {name!r}: {field} {file}: no such file")
    return single
