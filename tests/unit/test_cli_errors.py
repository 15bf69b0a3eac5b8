"""``run`` stops on SIGTERM without asyncio complaining of a result nobody took."""

from __future__ import annotations

import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:%(port)d"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""

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
    assert "Traceback" not in stderr, stderr
    assert code == 0, stderr
