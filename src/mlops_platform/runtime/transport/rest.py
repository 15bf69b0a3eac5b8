"""The REST vocabulary of the client: where a kind lives (:class:`Resource`), what a non-2xx answer
says (:class:`ApiError`), and what a finished request is (:class:`RequestRecord`). No I/O."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

JSON = dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Resource:
    """Where a kind lives in the REST API (a GroupVersionResource plus what the mapper knows)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
        if subresource:
            base += f"/{subresource}"
        return base


class ApiError(Exception):
    """A non-2xx answer of the API server."""

    def __init__(self, status: int, reason: str, message: str, body: JSON | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410 or self.reason == "Expired"


@dataclasses.dataclass(frozen=True, slots=True)
class RequestRecord:
    """One finished request, as counted and handed to observers."""

    verb: str
    resource: str
    namespace: str | None
    code: int
    seconds: float
    #: the object's name, for a request on one object (get, update, patch, delete, apply)
    name: str | None = None
    #: the client sends it again after the answer's ``Retry-After`` (a 429, a 5xx with the header):
    #: client-go's ``rest_client_request_retries_total``
    retried: bool = False


def verb_of(method: str, name: str | None, params: Mapping[str, Any] | None) -> str:
    """The Kubernetes verb of an HTTP request (``list``, ``watch``, ``deletecollection``...)."""
    if params and params.get("watch") in (True, "true", "1", 1):
        return "watch"
    match method:
        case "GET":
            return "get" if name else "list"
        case "POST":
            return "create"
        case "PUT":
            return "update"
        case "PATCH":
            return "patch"
        case "DELETE":
            return "delete" if name else "deletecollection"
    return method.lower()
