"""Where the kubeconfig comes from without ``--kubeconfig``: ``$KUBECONFIG``, then the in-cluster
service account, then ``~/.kube/config`` (controller-runtime's order; what every command's help says)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lightkube.config import kubeconfig as lightkube_kubeconfig
from lightkube.core.exceptions import ConfigError

from mlops_platform.runtime.transport import kubeconfig

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%(server)s:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def write(path: Path, server: str) -> Path:
    path.write_text(KUBECONFIG % {"server": server})
    return path


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A $KUBECONFIG file, a service account and a home kubeconfig, each naming its own server."""
    env = write(tmp_path / "env.yaml", "env.example")
    home = write(tmp_path / "home.yaml", "home.example")
    monkeypatch.setattr(kubeconfig, "DEFAULT_PATH", str(home))
    in_cluster = lightkube_kubeconfig.KubeConfig.from_dict(
        {
            "clusters": [{"name": "sa", "cluster": {"server": "https://in-cluster.example:443"}}],
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
    assert server(monkeypatch, places["env"]) == "https://env.example:6443"  # wins over the pod's account
    assert server(monkeypatch, None) == "https://in-cluster.example:443"
    places["in_cluster"] = False
    assert server(monkeypatch, None) == "https://home.example:6443"
    assert server(monkeypatch, places["env"]) == "https://env.example:6443"


def test_a_path_given_wins_over_everything(places: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(places["env"]))
    given = write(places["env"].with_name("given.yaml"), "given.example")
    assert str(kubeconfig.load(given).cluster.server) == "https://given.example:6443"
