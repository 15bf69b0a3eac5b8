"""``mlops-platform migrate-storage``: a CRD's objects rewritten at its storage version."""

from __future__ import annotations

import asyncio
from typing import cast

import click

from mlops_platform.cli import options


@click.command(name="migrate-storage")
@click.option(
    "--crd",
    "crd_name",
    default="inferenceservices.mlops.platform",
    help="the CustomResourceDefinition whose objects are rewritten at its storage version",
)
@options.kubeconfig_options(options.KUBECONFIG_DEFAULT)
@click.option(
    "--method",
    type=click.Choice(["auto", "builtin", "rewrite"]),
    default="auto",
    help="builtin: a StorageVersionMigration (storagemigration.k8s.io) done by kube-controller-manager; "
    "rewrite: PUT every object back; auto: builtin where served and acted on, else rewrite",
)
@click.option("--timeout", default=1800.0, help="seconds for the whole migration before giving up")
def migrate_storage(
    crd_name: str, kubeconfig: str | None, context: str | None, method: str, timeout: float
) -> None:
    """Rewrite every object of a CRD at its storage version, then trim status.storedVersions to it.

    Run it after a release changes the storage version, before a later one stops serving the old
    version. Safe to interrupt and run again: storedVersions changes only after every object was
    migrated. RBAC it needs: docs/storage-migration.md.
    """
    import time

    from mlops_platform.runtime.control import storagemigration as sm
    from mlops_platform.runtime.control import storagemigration_report as sm_report
    from mlops_platform.runtime.transport import client as rclient

    started = time.monotonic()
    shown_phase, shown_at = "", 0.0

    def progress(p: sm_report.Progress) -> None:
        # a line on each phase change, then at most one every 2 s
        nonlocal shown_phase, shown_at
        now = time.monotonic()
        if p.phase == shown_phase and now - shown_at < 2.0:
            return
        shown_phase, shown_at = p.phase, now
        if p.phase == "rewriting":
            of = f"/{p.total}" if p.total is not None else ""
            line = (
                f"rewriting: {p.seen}{of} objects ({p.rewritten} rewritten, {p.unchanged} already current, "
                f"{p.conflicts} conflicts, {p.gone} gone, {p.failed} failed)"
            )
        elif p.phase == "waiting":
            line = f"waiting: {p.message}"
        else:
            line = "trimming status.storedVersions"
        click.echo(f"[migrate {now - started:6.1f}s] {line}", err=True)

    async def run() -> sm_report.MigrationResult:
        async with rclient.Client.from_kubeconfig(kubeconfig, context=context) as c:
            how = cast("sm.Method", method)  # one of click's choices
            return await sm.migrate(c, crd_name, method=how, progress=progress, timeout=timeout)

    try:
        result = asyncio.run(run())
    except sm_report.MigrationError as e:
        raise click.ClickException(f"{crd_name}: {e}") from None
    except TimeoutError:
        raise click.ClickException(
            f"{crd_name}: not done within {timeout:.0f}s; storedVersions left as they were (run it again)"
        ) from None
    except (rclient.ApiError, rclient.TransportError, ValueError, OSError) as e:
        raise click.ClickException(f"{crd_name}: {e}; storedVersions left as they were") from None
    click.echo(result.summary())
