"""Which Service a request that reached the activator was for."""

from __future__ import annotations

import pytest

from mlops_platform.activator import target
from mlops_platform.activator.target import Target

PROXY = "/api/v1/namespaces/ml/services"


@pytest.mark.parametrize(
    ("headers", "want"),
    [
        # the API server's service proxy (what `mlops-platform infer` goes through)
        (
            {"X-Forwarded-Uri": f"{PROXY}/http:iris-predictor:http/proxy/v2/models/x/infer"},
            Target("ml", "iris-predictor"),
        ),
        (
            {"x-forwarded-uri": "/api/v1/namespaces/ml/services/iris-predictor/proxy/"},
            Target("ml", "iris-predictor"),
        ),
        (
            {"X-Forwarded-Uri": "/api/v1/namespaces/ml/services/https:iris-predictor:8443/proxy"},
            Target("ml", "iris-predictor"),
        ),
        # an in-cluster client calling the Service by name
        ({"Host": "iris-predictor.ml"}, Target("ml", "iris-predictor")),
        ({"Host": "iris-predictor.ml.svc"}, Target("ml", "iris-predictor")),
        ({"Host": "iris-predictor.ml.svc.cluster.local:80"}, Target("ml", "iris-predictor")),
        ({"Host": "Iris-Predictor.ML.svc.cluster.local."}, Target("ml", "iris-predictor")),
        # the proxy header wins over the Host (which is then the API server's address)
        (
            {"Host": "10.0.0.1:6443", "X-Forwarded-Uri": "/api/v1/namespaces/a/services/b/proxy/x"},
            Target("a", "b"),
        ),
        # no namespace, an address, another API path: no target
        ({"Host": "iris-predictor"}, None),
        ({"Host": "10.96.0.12:80"}, None),
        ({"Host": "127.0.0.1:32764", "X-Forwarded-Uri": "/api/v1/namespaces/ml/pods/p/proxy/"}, None),
        ({"Host": "a.b.c.d"}, None),
        ({}, None),
    ],
)
def test_the_target_comes_from_the_proxy_path_or_the_service_name(
    headers: dict[str, str], want: Target | None
) -> None:
    assert target.of_request(headers) == want


def test_a_request_proxied_to_the_activators_own_service_names_its_target_by_host() -> None:
    own = Target("mlops-system", "mlops-activator")
    headers = {
        "Host": "sleepy-predictor.ml.svc",
        "X-Forwarded-Uri": "/api/v1/namespaces/mlops-system/services/http:mlops-activator:proxy/proxy/v2/x",
    }
    assert target.of_request(headers, own) == Target("ml", "sleepy-predictor")
    assert target.of_request(headers) == own  # without knowing itself it would take the proxy path
