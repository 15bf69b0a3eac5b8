"""``python -m mlops_platform.storage fetch URI DEST [options]``: the command line, and the one
failure line (``model download failed: <reason>``) in the termination log and on stderr.

Every failure ends here, also a bad argument (click's usage errors) and an unexpected exception
(whose stack trace goes to the JSON log too, but never instead of the line).
"""

from __future__ import annotations

import logging
import signal
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import click

from mlops_platform.runtime.observability import logs
from mlops_platform.storage import failure, initializer, layouts

log = logging.getLogger("mlops_platform.storage")

DEFAULT_TERMINATION_LOG = Path("/dev/termination-log")
#: exit codes: a failed delivery, bad arguments (click's own code)
EXIT_FAILED, EXIT_USAGE = 1, 2


class _Terminated(Exception):
    """SIGTERM: the pod is going away."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """The storage initializer: deliver a model into the model directory of its server."""


@cli.command()
@click.argument("uri")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--layout",
    type=click.Choice(layouts.LAYOUTS),
    default="none",
    show_default=True,
    help="How the runtime expects the files.",
)
@click.option("--name", default="model", show_default=True, help="The model's name in the server.")
@click.option("--format", "model_format", help="The model format (generated configs use it).")
@click.option("--sha256", help="Expected SHA-256 of the single object (an archive before unpacking).")
@click.option(
    "--credentials",
    type=click.Path(file_okay=False, path_type=Path),
    help="A mounted Secret: one file per key (AWS_*, GOOGLE_SERVICE_ACCOUNT_KEY, HTTP_AUTHORIZATION).",
)
@click.option("--endpoint", help="An S3-compatible endpoint (s3://) or a GCS API endpoint (gs://).")
@click.option("--region", help="The S3 region (default: the Secret's AWS_REGION, else us-east-1).")
@click.option(
    "--termination-log",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_TERMINATION_LOG,
    show_default=True,
    help="Where the failure line goes (besides stderr).",
)
@click.option("--log-level", default="info", show_default=True, help="debug, info, warning or error.")
def fetch(
    uri: str,
    dest: Path,
    layout: str,
    name: str,
    model_format: str | None,
    sha256: str | None,
    credentials: Path | None,
    endpoint: str | None,
    region: str | None,
    termination_log: Path,
    log_level: str,
) -> None:
    """Fetch the model at URI (s3://, gs://, http(s)://) into the directory DEST."""
    del termination_log  # read before parsing (main), so that argument errors reach it too
    logs.setup_logging(log_level)
    if not name or "/" in name or name in (".", ".."):
        raise failure.DownloadFailed(f"--name {name!r} is not a model name")
    initializer.fetch(
        initializer.Request(
            uri=uri,
            dest=dest,
            layout=layout,
            name=name,
            model_format=model_format,
            sha256=sha256,
            credentials=credentials,
            endpoint=endpoint,
            region=region,
        )
    )


def termination_log_path(args: Sequence[str]) -> Path:
    """``--termination-log`` as given in ``args`` (``--termination-log P`` or ``=P``), else the default."""
    for i, arg in enumerate(args):
        if arg == "--termination-log" and i + 1 < len(args):
            return Path(args[i + 1])
        if arg.startswith("--termination-log="):
            return Path(arg.split("=", 1)[1])
    return DEFAULT_TERMINATION_LOG


def report(reason: str, termination_log: Path) -> str:
    """Write the failure line to the termination log (best effort: outside a pod it may not be
    writable) and to stderr; returns the line."""
    text = failure.line(reason)
    try:
        termination_log.write_text(text + "\n", encoding="utf-8")
    except OSError as e:
        log.debug("termination log not written", extra={"path": str(termination_log), "cause": str(e)})
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
    return text


def _on_sigterm(signum: int, frame: types.FrameType | None) -> None:
    del signum, frame
    raise _Terminated


def run(args: Sequence[str]) -> int:
    """Run the command line ``args``; the exit code."""
    termination_log = termination_log_path(args)
    logs.setup_logging("info")
    try:
        code = cli.main(list(args), prog_name="python -m mlops_platform.storage", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.exceptions.Abort:
        report("interrupted", termination_log)
        return EXIT_FAILED
    except click.ClickException as e:
        report(f"bad arguments: {e.format_message()}", termination_log)
        return EXIT_USAGE
    except failure.DownloadFailed as e:
        report(e.reason, termination_log)
        return EXIT_FAILED
    except (_Terminated, KeyboardInterrupt):
        report("interrupted (the pod is stopping)", termination_log)
        return EXIT_FAILED
    except Exception as e:
        log.error("unexpected error", exc_info=e)
        report(f"unexpected error: {type(e).__name__}: {e}", termination_log)
        return EXIT_FAILED
    return code if isinstance(code, int) else 0


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``python -m mlops_platform.storage`` entry point."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    sys.exit(run(sys.argv[1:] if argv is None else argv))
