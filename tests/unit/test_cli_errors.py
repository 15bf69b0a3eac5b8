"""Bad input to the command line is a usage error naming the flag, never a traceback: a kubeconfig the
command cannot use (``Error: --kubeconfig PATH: REASON``, exit code 2, for every command taking
``--kubeconfig``), a malformed ``HOST:PORT`` of a bind-address flag; and ``run`` stops on SIGTERM
without asyncio complaining of a result nobody took."""

from __future__ import annotations

import dataclasses
import errno
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from lightkube.config import kubeconfig as lightkube_kubeconfig
from lightkube.core.exceptions import ConfigError
from tests.unit import test_cli

from mlops_platform import cli
from mlops_platform.cli import operator, webhook
from mlops_platform.runtime.observability import logs

KUBECONFIG = test_cli.KUBECONFIG  # %(port)d: the API server's port

#: every command that takes --kubeconfig, with the arguments it needs besides
COMMANDS: dict[str, list[str]] = {
    "run": ["run", "--webhook-bind-address", "off"],
    "run+webhook": ["run", "--webhook-bind-address", "127.0.0.1:0"],
    "webhook": ["webhook", "--webhook-bind-address", "127.0.0.1:0"],
    "infer": ["infer", "iris", "--json", "{}"],
    "infer -n": ["infer", "iris", "-n", "ml", "--json", "{}"],
    "why": ["why", "iris"],
    "why -n": ["why", "iris", "-n", "ml"],
    "migrate-storage": ["migrate-storage"],
}

#: a broken kubeconfig (its file's text, or None: no file) and what the error says of it
BROKEN: dict[str, tuple[str | bytes | None, list[str], str]] = {
    "missing": (None, [], "cannot read it: No such file or directory"),
    "not YAML": ("clusters: [c\n", [], "not YAML: "),
    "not UTF-8": (b"\xff\xfe\x00clusters", [], "not YAML: not UTF-8 text"),
    "empty": ("", [], "not a kubeconfig: empty"),
    "a string": ("just words\n", [], "not a kubeconfig: a YAML str, not a mapping"),
    "no clusters": ("contexts: []\n", [], "not a kubeconfig: no list of clusters"),
    "no current context": (
        KUBECONFIG.replace("current-context: c\n", ""),
        [],
        "no current-context, and no context asked for (its contexts: c)",
    ),
    "--context not in it": (KUBECONFIG, ["--context", "nope"], "no context 'nope' (its contexts: c)"),
    "current context not in it": (
        KUBECONFIG.replace("current-context: c", "current-context: gone"),
        [],
        "its current-context is 'gone' (its contexts: c)",
    ),
    "a context's cluster not in it": (
        KUBECONFIG.replace("{cluster: c, user: u}", "{cluster: zz, user: u}"),
        [],
        "context 'c' names cluster 'zz', which it does not define",
    ),
    "a missing CA file": (
        KUBECONFIG.replace('127.0.0.1:%(port)d"}', '127.0.0.1:%(port)d", certificate-authority: ca.crt}'),
        [],
        "context 'c': certificate-authority ca.crt: no such file",
    ),
    "a CA that is no certificate": (
        KUBECONFIG.replace('127.0.0.1:%(port)d"}', '127.0.0.1:%(port)d", certificate-authority: bad.crt}'),
        [],
        "context 'c': its TLS files or credentials: ",
    ),
}


@pytest.fixture
def no_logging_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run`` and ``webhook`` set up the process's logging: not in this process's tests."""
    monkeypatch.setattr(logs, "setup_logging", lambda **kwargs: None)


def invoke(args: list[str], env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli.main, args, env=env)


def assert_usage_error(result: Result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # no other exception escaped
    assert "Traceback" not in result.output
    assert message in result.output, result.output


@pytest.mark.usefixtures("no_logging_setup")
@pytest.mark.parametrize("broken", list(BROKEN))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_kubeconfig_the_command_cannot_use_is_a_usage_error_naming_the_flag(
    tmp_path: Path, command: str, broken: str
) -> None:
    text, extra, reason = BROKEN[broken]
    path = tmp_path / "kubeconfig"
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text % {"port": 1} if "%(port)" in text else text)
    (tmp_path / "bad.crt").write_text("not a certificate\n")
    result = invoke([*COMMANDS[command], "--kubeconfig", str(path), *extra])
    assert_usage_error(result, reason)
    assert f"Error: --kubeconfig {path}: " in result.output
    assert "Usage: " in result.output  # click's usage error: the usage line, then the error


@pytest.mark.usefixtures("no_logging_setup")
@pytest.mark.parametrize("command", ["run", "webhook", "why", "infer", "migrate-storage"])
def test_without_the_flag_the_error_says_where_the_kubeconfig_was_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    def not_in_a_cluster(*args: Any, **kwargs: Any) -> Any:
        raise ConfigError("no service account token")

    monkeypatch.setattr(lightkube_kubeconfig.KubeConfig, "from_service_account", not_in_a_cluster)
    missing = tmp_path / "nope.yaml"
    result = invoke(COMMANDS[command], env={"KUBECONFIG": str(missing)})
    assert_usage_error(
        result,
        f"Error: kubeconfig $KUBECONFIG {missing} (no --kubeconfig given): "
        "cannot read it: No such file or directory",
    )


@pytest.mark.usefixtures("no_logging_setup")
def test_an_unreadable_kubeconfig_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG % {"port": 1})
    read_text = Path.read_text

    def unreadable(self: Path, *args: Any, **kwargs: Any) -> str:
        if self == path:  # as for a user without read permission (root reads any file)
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", unreadable)
    result = invoke(["migrate-storage", "--kubeconfig", str(path)])
    assert_usage_error(result, f"Error: --kubeconfig {path}: cannot read it: Permission denied")


#: the address flags of run and webhook
ADDRESS_FLAGS = [
    ("run", "--health-probe-bind-address"),
    ("run", "--metrics-bind-address"),
    ("run", "--webhook-bind-address"),
    ("webhook", "--metrics-bind-address"),
    ("webhook", "--webhook-bind-address"),
]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("nowhere", "'nowhere': not HOST:PORT"),
        ("1.2.3.4:99999", "'1.2.3.4:99999': port 99999 is not in 0-65535"),
        (":abc", "':abc': port 'abc' is not a number"),
        ("127.0.0.1:", "'127.0.0.1:': no port"),
        ("127.0.0.1:-1", "'127.0.0.1:-1': port '-1' is not a number"),
        ("a b:80", "'a b:80': host 'a b' is neither an IP address nor a host name"),
        ("[1.2.3.4]:80", "'[1.2.3.4]:80': [1.2.3.4] is not an IPv6 address"),
    ],
)
@pytest.mark.parametrize(("command", "flag"), ADDRESS_FLAGS)
def test_a_malformed_address_is_a_usage_error_naming_the_flag(
    command: str, flag: str, value: str, reason: str
) -> None:
    result = invoke([command, flag, value])
    off = "0" if flag == "--metrics-bind-address" or "health" in flag else "off"
    assert_usage_error(
        result,
        f"Error: Invalid value for '{flag}': {reason}; expected HOST:PORT, or {off!r} to serve nothing",
    )


@pytest.mark.parametrize(("command", "flag"), ADDRESS_FLAGS)
def test_a_host_that_does_not_resolve_is_a_usage_error_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch, command: str, flag: str
) -> None:
    def getaddrinfo(host: str, *args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    result = invoke([command, flag, "nowhere.invalid:80"])
    assert_usage_error(
        result,
        f"Error: Invalid value for '{flag}': 'nowhere.invalid:80': host 'nowhere.invalid': "
        "Name or service not known",
    )


@pytest.mark.parametrize(
    ("command", "flag", "value"),
    [
        ("run", "--webhook-bind-address", "0"),
        ("webhook", "--webhook-bind-address", "0"),
    ],
)
def test_the_webhook_is_off_with_off_only(command: str, flag: str, value: str) -> None:
    result = invoke([command, flag, value])
    assert_usage_error(
        result, f"Error: Invalid value for '{flag}': '0': expected HOST:PORT, or 'off' to serve nothing"
    )


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    return test_cli.record_served(monkeypatch)


@pytest.mark.parametrize(
    ("value", "address"),
    [
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        (":8081", ("127.0.0.1", 8081)),
        ("[::1]:0", ("::1", 0)),
        ("0.0.0.0:65535", ("0.0.0.0", 65535)),
        ("localhost:0", ("localhost", 0)),
        ("0", None),
    ],
)
def test_well_formed_addresses_still_reach_the_manager(
    served: list[tuple[Any, ...]], value: str, address: tuple[str, int] | None
) -> None:
    result = invoke(["run", "--health-probe-bind-address", value, "--metrics-bind-address", value])
    assert result.exit_code == 0, result.output
    [(process, leases, _, _, _)] = served
    manager_options = operator._manager_options(process, leases)
    assert manager_options.health_probe_address == manager_options.metrics_address == address


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--prometheus-ca-file", __file__], "go with --prometheus-url"),
        (
            ["--prometheus-url", "https://prom:9090", "--prometheus-ca-file", "no-such-ca.pem"],
            "'--prometheus-ca-file'",
        ),
        (["--prometheus", "prometheus"], "--prometheus: 'prometheus' is not NAMESPACE/SERVICE:PORT"),
        (["--prometheus-url", "ftp://prom"], "--prometheus-url"),
    ],
)
def test_run_refuses_prometheus_flags_that_do_not_go_together(
    served: list[tuple[Any, ...]], args: list[str], says: str
) -> None:
    result = invoke(["run", *args])
    assert result.exit_code == 2 and says in result.output, result.output
    assert served == []


def test_the_webhook_builds_with_a_bracketed_ipv6_address() -> None:
    hook = dataclasses.replace(test_cli.WEBHOOK_FLAGS, webhook_bind_address="[::1]:0")
    from prometheus_client import CollectorRegistry

    serving = webhook.build(None, hook, CollectorRegistry())
    assert (serving.options.host, serving.options.port) == ("::1", 0)


@pytest.mark.usefixtures("no_logging_setup")
@pytest.mark.parametrize(("command", "flag"), ADDRESS_FLAGS)
def test_an_address_taken_is_an_error_naming_the_flag(tmp_path: Path, command: str, flag: str) -> None:
    """Well formed but taken (another process listens there): the command ends with an error naming
    the flag (exit code 1: not a usage error), not a traceback; ``run`` does not go on without its
    webhook."""
    with socket.socket() as refusing, socket.socket() as taken:
        refusing.bind(("127.0.0.1", 0))
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(KUBECONFIG % {"port": refusing.getsockname()[1]})
        loopback = {f: "127.0.0.1:0" for c, f in ADDRESS_FLAGS if c == command}
        loopback[flag] = address = f"127.0.0.1:{taken.getsockname()[1]}"
        args = [command, "--kubeconfig", str(kubeconfig), *(x for item in loopback.items() for x in item)]
        result = invoke(args)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert f"{flag} {address}" in result.output
    assert result.output.rstrip("\n").lower().endswith("address already in use"), result.output


@pytest.mark.usefixtures("no_logging_setup")
@pytest.mark.parametrize(("command", "flag"), ADDRESS_FLAGS)
def test_an_address_the_process_may_not_bind_is_an_error_naming_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, flag: str
) -> None:
    """A port the process has no right to (below 1024 without CAP_NET_BIND_SERVICE; the kernel
    answers EACCES, emulated here as the tests run as root): an error naming the flag, exit code 1,
    not a traceback."""
    forbidden = 80
    bind = socket.socket.bind

    def refuse(self: socket.socket, address: Any) -> None:
        if isinstance(address, tuple) and address[1] == forbidden:
            raise PermissionError(errno.EACCES, "Permission denied")
        bind(self, address)

    with socket.socket() as refusing:
        refusing.bind(("127.0.0.1", 0))
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(KUBECONFIG % {"port": refusing.getsockname()[1]})
        loopback = {f: "127.0.0.1:0" for c, f in ADDRESS_FLAGS if c == command}
        loopback[flag] = address = f"127.0.0.1:{forbidden}"
        args = [command, "--kubeconfig", str(kubeconfig), *(x for item in loopback.items() for x in item)]
        monkeypatch.setattr(socket.socket, "bind", refuse)
        result = invoke(args)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert f"{flag} {address}" in result.output
    assert result.output.rstrip("\n").lower().endswith("permission denied"), result.output


# -- SIGTERM ------------------------------------------------------------------------------------


class Lines:
    """A process's stderr, read line by line on a thread: waits for a line are bounded."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        self._stream = proc.stderr
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, matches: Callable[[str], bool], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._queue.get(timeout=max(remaining, 0.0))
            except queue.Empty:
                raise AssertionError(f"no such line within {timeout}s:\n{''.join(self.seen)}") from None
            if line is None:
                raise AssertionError(f"the process ended first:\n{''.join(self.seen)}")
            self.seen.append(line)
            if matches(line):
                return line

    def rest(self, timeout: float) -> str:
        """Everything up to the end of the stream (the process has ended)."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "stderr still open"
        while (line := self._queue.get_nowait()) is not None:
            self.seen.append(line)
        return "".join(self.seen)


def test_run_stops_cleanly_on_sigterm_while_the_caches_wait_for_an_unreachable_api_server(
    tmp_path: Path,
) -> None:
    """SIGTERM while every informer retries an API server that refuses connections: the operator
    stops (exit code 0) with no "_GatheringFuture exception was never retrieved" (the cache's wait for
    the sync, cancelled, left its gather's CancelledError unretrieved)."""
    with socket.socket() as refusing:  # bound, never listening: connections to it are refused
        refusing.bind(("127.0.0.1", 0))
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(KUBECONFIG % {"port": refusing.getsockname()[1]})
        args = [sys.executable, "-m", "mlops_platform.cli", "run", "--kubeconfig", str(kubeconfig)]
        loopback = ["--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", "127.0.0.1:0"]
        proc = subprocess.Popen(
            [*args, *loopback, "--webhook-bind-address", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            lines = Lines(proc)
            lines.wait_for(lambda line: "waiting for caches to sync" in line, timeout=120)
            # an informer has failed to list: the wait for the sync is under way
            lines.wait_for(lambda line: "list/watch connection error" in line, timeout=60)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
            stderr = lines.rest(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "manager stopped" in stderr, stderr
    assert "was never retrieved" not in stderr, stderr
    assert '"caches synced"' not in stderr, stderr  # the stop ended the wait, not a sync
    assert "Traceback" not in stderr, stderr
    assert code == 0, stderr
