"""Where the kubeconfig comes from without ``--kubeconfig``: ``$KUBECONFIG``, then the in-cluster
service account, then ``~/.kube/config`` (controller-runtime's order; what every command's help says)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lightkube.config import kubeconfig as lightkube_kubeconfig
from lightkube.core.exceptions import ConfigError
from tests.unit import test_cli

from mlops_platform.runtime.transport import kubeconfig


def write(path: Path, port: int) -> Path:
    """A kubeconfig naming its place by its server's port."""
    path.write_text(test_cli.KUBECONFIG % {"port": port})
    return path


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A $KUBECONFIG file, a service account and a home kubeconfig, each naming its own server."""
    env = write(tmp_path / "env.yaml", 1001)
    home = write(tmp_path / "home.yaml", 1003)
    monkeypatch.setattr(kubeconfig, "DEFAULT_PATH", str(home))
    in_cluster = lightkube_kubeconfig.KubeConfig.from_dict(
        {
            "clusters": [{"name": "sa", "cluster": {"server": "https://127.0.0.1:1002"}}],
            "users": [{"name": "sa", "user": {"token": "t"}}],
            "contexts": [{"name": "sa", "context": {"cluster": "sa", "user": "sa"}}],
            "current-context": "sa",
        }
    )
    state: dict[str, Any] = {"env": env, "in_cluster": True}

    def service_account(*args: Any, **kwargs: Any) -> lightkube_kubeconfig.KubeConfig:
        if not state["in_cluster"]:
            raise ConfigError("no service account token")
        return in_cluster

    monkeypatch.setattr(lightkube_kubeconfig.KubeConfig, "from_service_account", service_account)
    return state


def server(monkeypatch: pytest.MonkeyPatch, env: Path | None) -> str:
    if env is None:
        monkeypatch.delenv("KUBECONFIG", raising=False)
    else:
        monkeypatch.setenv("KUBECONFIG", str(env))
    return str(kubeconfig.load(None).cluster.server)


def test_kubeconfig_env_then_in_cluster_then_home(
    places: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert server(monkeypatch, places["env"]) == "https://127.0.0.1:1001"  # wins over the pod's account
    assert server(monkeypatch, None) == "https://127.0.0.1:1002"
    places["in_cluster"] = False
    assert server(monkeypatch, None) == "https://127.0.0.1:1003"
    assert server(monkeypatch, places["env"]) == "https://127.0.0.1:1001"


def test_a_path_given_wins_over_everything(places: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(places["env"]))
    given = write(places["env"].with_name("given.yaml"), 1004)
    assert str(kubeconfig.load(given).cluster.server) == "https://127.0.0.1:1004"
