"""free_port: below the ephemeral range, where no outgoing connection takes a port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from mlops_platform.testing import ports


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_a_port_comes_from_below_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "range").write_text("32768\t60999\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", tmp_path / "range")
    got = [ports.free_port() for _ in range(50)]
    assert all(ports.LOWEST <= p < 32768 - ports.BELOW_EPHEMERAL for p in got), got
    assert len(set(got)) > 1  # at random: two callers at once rarely get the same one
    assert all(_bindable(p) for p in got)


def test_a_port_that_is_taken_is_not_handed_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        # a range whose room below holds exactly the taken port: never it, the kernel's pick instead
        (tmp_path / "range").write_text(f"{port + ports.BELOW_EPHEMERAL + 1} 60999\n")
        monkeypatch.setattr(ports, "EPHEMERAL_RANGE", tmp_path / "range")
        monkeypatch.setattr(ports, "LOWEST", port)
        assert ports.free_port() != port


@pytest.mark.parametrize("content", [None, "1024 65535", "garbage", ""])
def test_without_room_below_the_range_the_kernel_picks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: str | None
) -> None:
    if content is not None:
        (tmp_path / "range").write_text(content)
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", tmp_path / "range")

    def no_pick_below(*args: object) -> int:
        raise AssertionError("picked below a range it could not read or that leaves no room")

    monkeypatch.setattr(ports.random, "randrange", no_pick_below)
    assert _bindable(ports.free_port())
