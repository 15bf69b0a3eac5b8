"""The reliability suite's fixtures: ``scenario`` (:class:`scenario.Scenario`: the admin client, the
test's namespace with the CRD installed, the kubeconfig, a log directory, the scenario's row) and
the suite's table: each scenario adds its :class:`reliability.Row` (``scenario.report``, or the
``reliability_report`` fixture); at the end of the run the table is printed and, with
``MLOPS_RELIABILITY_REPORT=<file>`` (``make test-reliability`` sets ``docs/reliability.md``), written
into that file between its two marker lines, with the command and the date of the run, when every
selected test passed (a failed scenario adds no row, so a partial table would pass for a whole one)."""

from __future__ import annotations

import datetime
import os
import platform
import re
import shlex
import sys
from pathlib import Path

import pytest

from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import reliability, webhook
from mlops_platform.testing.scenario import Scenario

REPORT_ENV = "MLOPS_RELIABILITY_REPORT"
BEGIN, END = "<!-- reliability-table:begin -->", "<!-- reliability-table:end -->"
_ROWS: list[reliability.Row] = []


class Report:
    def add(self, row: reliability.Row) -> None:
        _ROWS.append(row)


@pytest.fixture(scope="session")
def reliability_report() -> Report:
    return Report()


@pytest.fixture
async def scenario(
    kube_cluster: Path,
    admin_client: rclient.Client,
    namespace: str,
    tmp_path: Path,
    reliability_report: Report,
) -> Scenario:
    """The test's namespace, the CRD installed (re-applied: a scenario before may have replaced it)
    against the session's conversion webhook, operator logs in ``tmp_path``."""
    await webhook.install_crd(admin_client)
    return Scenario(admin_client, namespace, kube_cluster, tmp_path, reliability_report.add)


def _order(row: reliability.Row) -> tuple[int, str]:
    match = re.match(r"(\d+)", row.scenario)
    return (int(match.group(1)) if match else 99, row.scenario)


def _section(rows: list[reliability.Row]) -> str:
    mode = "full" if reliability.full() else "reduced (make test)"
    command = "make test-reliability" if reliability.full() else shlex.join(["pytest", *sys.argv[1:]])
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{BEGIN}\n"
        f"Run of {when}, {mode}, printed by `{command}` on {os.cpu_count()} cores "
        f"({platform.system()} {platform.machine()}, Python {platform.python_version()}):\n\n"
        f"{reliability.table(sorted(rows, key=_order))}"
        f"{END}"
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    if not _ROWS:
        return
    section = _section(_ROWS)
    terminalreporter.write_sep("=", "reliability suite")
    terminalreporter.write_line(section)
    target = os.environ.get(REPORT_ENV)
    if target and exitstatus != pytest.ExitCode.OK:
        # a failed scenario adds no row: the table would look like a whole run that passed
        terminalreporter.write_line(f"table NOT written to {target}: the run failed (exit {exitstatus})")
    elif target:
        path = Path(target)
        text = path.read_text()
        if BEGIN not in text or END not in text:
            raise pytest.UsageError(f"{path}: needs the lines {BEGIN} and {END} to write the table between")
        head, rest = text.split(BEGIN, 1)
        path.write_text(head + section + rest.split(END, 1)[1])
        terminalreporter.write_line(f"table written to {path}")
