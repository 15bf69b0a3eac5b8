"""``mlops-platform infer``: one inference request through the API server (also ``kubectl mlops infer``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, TextIO

import click

from mlops_platform.cli import options


@click.command(name="infer")
@click.argument("name")
@options.namespace_option
@click.option("--json", "body", metavar="BODY", help="the request body (JSON)")
@click.option(
    "--file", "body_file", type=click.File("r"), help="a file holding the request body (JSON; - for stdin)"
)
@click.option("--model", help="the model's name in the server (default: NAME)")
@click.option(
    "--path", help="the server's inference path (default: the runtime's; {model} is the model's name)"
)
@click.option(
    "--timeout",
    type=click.FloatRange(0, min_open=True),
    default=300.0,
    help="seconds to wait for the answer (a model at zero answers once woken)",
)
@options.kubeconfig_options(options.KUBECONFIG_DEFAULT)
def infer_command(
    name: str,
    namespace: str | None,
    body: str | None,
    body_file: TextIO | None,
    model: str | None,
    path: str | None,
    timeout: float,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Send one inference request to NAME through the API server and print the answer.

    The runtime's protocol: Open Inference Protocol v2 (MLServer, Triton: POST
    /v2/models/NAME/infer), TorchServe's /predictions/NAME. Exits 1 with the server's error when
    the request fails. Example: mlops-platform infer iris -n ml --json
    '{"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64", "data": [6.8, 2.8, 4.8, 1.4]}]}'
    """
    from mlops_platform import infer
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.why import command as why_command_io

    if (body is None) == (body_file is None):
        raise click.UsageError("give the request body with exactly one of --json and --file")
    text = body if body is not None else body_file.read() if body_file is not None else ""
    try:
        request = json.loads(text)
    except json.JSONDecodeError as e:
        raise click.BadParameter(
            f"not JSON: {e}", param_hint="--json" if body is not None else "--file"
        ) from None

    async def send() -> Any:
        ns = namespace or why_command_io.default_namespace(kubeconfig, context)
        async with rclient.Client.from_kubeconfig(kubeconfig, context=context) as c:
            return await infer.infer(c, name, ns, request, model=model, path=path, timeout=timeout)

    try:
        answer = asyncio.run(send())
    except infer.InferError as e:
        raise click.ClickException(str(e)) from None
    except rclient.TransportError as e:
        raise click.ClickException(f"the API server: {e}") from None
    click.echo(answer if isinstance(answer, str) else json.dumps(answer, indent=2))
