"""The ``mlops-platform`` command line, and the ``kubectl mlops`` plugin.

One module per command group: ``operator`` (``run``), ``webhook``, ``manifests``, ``why_command``,
``infer_command``, ``storage_migration`` (``migrate-storage``), ``install_crd`` (``install-crd``),
``dev`` (``dev ...`` and ``demo``);
``options`` and ``settings`` hold the flags several of them share. Each command imports what it runs
only when it runs: the CLI starts fast.
"""

from __future__ import annotations

import click

from mlops_platform import __version__
from mlops_platform.cli import (
    activator_command,
    dev,
    infer_command,
    install_crd,
    manifests,
    operator,
    storage_migration,
    webhook,
    why_command,
)

#: every option's help shows its default (an option without one shows none), in every command
HELP_SHOWS_DEFAULTS = {"show_default": True}


@click.group(context_settings=HELP_SHOWS_DEFAULTS)
@click.version_option(__version__, prog_name="mlops-platform")
def main() -> None:
    """mlops-platform: one InferenceService manifest -> a converged model-inference service."""


main.add_command(operator.run)
main.add_command(webhook.webhook)
main.add_command(manifests.manifests)
main.add_command(why_command.why_command)
main.add_command(infer_command.infer_command)
main.add_command(dev.dev)
main.add_command(dev.demo)
main.add_command(storage_migration.migrate_storage)
main.add_command(install_crd.install_crd)
main.add_command(activator_command.activator)


@click.group(name="kubectl mlops", context_settings=HELP_SHOWS_DEFAULTS)
@click.version_option(__version__, prog_name="kubectl-mlops")
def plugin() -> None:
    """The kubectl plugin of mlops-platform: kubectl mlops why NAME [-n NAMESPACE], kubectl mlops
    infer NAME [-n NAMESPACE] --json BODY."""


plugin.add_command(why_command.why_command)
plugin.add_command(infer_command.infer_command)


def kubectl_plugin() -> None:
    """The ``kubectl-mlops`` executable: kubectl runs it for ``kubectl mlops ...``."""
    plugin(prog_name="kubectl mlops")
