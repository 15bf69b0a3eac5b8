"""hostports.holding: one holder of a fixed port at a time on the machine, and the port free first."""

from __future__ import annotations

import asyncio
import socket
import tempfile
from pathlib import Path

import pytest

from mlops_platform.testing import hostports, ports


@pytest.fixture(autouse=True)
def own_lock_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Lock files of this test's own (a real test session's locks are not touched)."""
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))


async def test_a_second_holder_waits_for_the_first() -> None:
    port = ports.free_port()
    async with hostports.holding([port]):
        assert hostports.lock_path(port).exists()
        with pytest.raises(TimeoutError, match=f"the host-wide lock of port {port} not met"):
            async with hostports.holding([port], timeout=0.3):
                pass
        waiter = asyncio.create_task(_hold(port))  # gets it once the first lets go
    await asyncio.wait_for(waiter, 10)


async def _hold(port: int) -> None:
    async with hostports.holding([port, port], timeout=10):
        pass


async def test_a_port_another_process_listens_on_is_waited_for() -> None:
    port = ports.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert not hostports.bindable(port)
        with pytest.raises(TimeoutError, match=f"port {port} free on 127.0.0.1 not met"):
            async with hostports.holding([port], timeout=0.3):
                pass
    assert hostports.bindable(port)
    async with hostports.holding([port], timeout=5):  # the failed attempt left no lock behind
        pass
